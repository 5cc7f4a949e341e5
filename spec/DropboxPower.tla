---------------------------- MODULE DropboxPower ----------------------------
(***************************************************************************)
(* Power loss, not just kill -9.  A rename or create is in the directory   *)
(* in memory at once but survives a power cut only once a directory fsync *)
(* (or the kernel's writeback) has made it durable.  This module wraps     *)
(* Dropbox: dur[m] is the last durable entry of message m (a set of at     *)
(* most one file; {} = none), and PowerLoss kills every process and puts   *)
(* any set of messages back to their durable entry.                       *)
(*                                                                         *)
(* The fsyncs of the implementation that matter to a sender:              *)
(*   send() of a PERSISTENT message: rename working -> target, fsync      *)
(*     target/, return (SendReturns);                                      *)
(*   commit(): fsync target/ after the renames, then unlink the log       *)
(*     (DeleteLogProd), then return.                                       *)
(* The receive side:                                                       *)
(*   acknowledge() (CLIENT): rename processing -> processed for each,      *)
(*     fsync processed/, return (AckReturns);                              *)
(*   a transacted consumer's commit(): fsync processing/ (its claims)     *)
(*     and rename its log into committing/ (EnterCommittingCons, D3), its  *)
(*     renames, fsync processed/, unlink the log, return                   *)
(*     (CommitConsReturns).                                                *)
(* Every other entry becomes durable whenever the kernel writes it back   *)
(* (Writeback).  NoLossAckedSend: what send() or commit() acknowledged is  *)
(* never lost (nor back to uncommitted) -- unless purged.                  *)
(* AckedStaysAcked: what acknowledge() or a consumer's commit() returned   *)
(* for is never put back and delivered again.                              *)
(* CommittedRecvStays: what a consumer's commit took past its point of no  *)
(* return (its log in committing/) stays acknowledged, returned or not.   *)
(***************************************************************************)
EXTENDS DropboxMC

VARIABLES
    dur,        \* dur[m]: m's durable directory entry ({} or one file)
    sendDone,   \* history: messages whose send() / commit() returned
    scope,      \* scope[c]: what c's running acknowledge() acknowledges
    ackDone,    \* history: messages whose acknowledge() / consumer commit() returned
    committedRecv \* history: receives of consumer commits past the point of no return

pvars == <<vars, dur, sendDone, scope, ackDone, committedRecv>>

(* The definitions the mutants override: send() fsyncs target/ before it *)
(* returns; acknowledge() and a consumer's commit() fsync processed/     *)
(* before they return (mutants: they return without the fsync).          *)
SendSyncsTarget == TRUE
MutantSendSyncsTarget == FALSE
AckSyncsProcessed == TRUE
MutantAckSyncsProcessed == FALSE
(* A consumer's commit fsyncs processing/ before its point of no return   *)
(* (mutant: its claims may still be undone), and fsyncs processed/ before  *)
(* it unlinks its log (mutant: unlinks first; the sync and the return that *)
(* follow are not even needed to show the bug, so they are left out).     *)
ClaimsSyncedAtCommit == TRUE
MutantClaimsSyncedAtCommit == FALSE
SyncBeforeUnlink == TRUE
MutantSyncBeforeUnlink == FALSE

Volatile == {m \in Msg : FilesOf(m) # dur[m]}
(* fsync of target/: every entry renamed into target/ is durable now, and *)
(* so is every rename out of it not yet durable (a claim that came before *)
(* the fsync; the model then takes the message's later renames as durable *)
(* too, which only spares them from being undone).                       *)
SyncTarget ==
    dur' = [m \in Msg |-> IF \/ In(m, "target")
                             \/ m \in everNew /\ \A f \in dur[m] : f.d \in {"working", "target"}
                          THEN FilesOf(m) ELSE dur[m]]

(* fsync of processed/: every entry renamed into it is durable now.       *)
SyncProcessed ==
    dur' = [m \in Msg |-> IF In(m, "processed") THEN FilesOf(m) ELSE dur[m]]

PInit == Init /\ dur = [m \in Msg |-> {}] /\ sendDone = {}
         /\ scope = [c \in Consumer |-> {}] /\ ackDone = {} /\ committedRecv = {}

(* send() of plain message m returns after the rename (Send).            *)
SendReturns(m) ==
    /\ alive[Prod] /\ m \notin TxMsgs /\ m \notin sendDone
    /\ m \in everNew
    /\ IF SendSyncsTarget THEN SyncTarget ELSE UNCHANGED dur
    /\ sendDone' = sendDone \cup {m}
    /\ UNCHANGED <<vars, scope, ackDone, committedRecv>>

(* The producer's commit: fsync target/, unlink the log, return.          *)
CommitReturns ==
    /\ DeleteLogProd
    /\ SyncTarget
    /\ sendDone' = sendDone \cup logset[Prod]
    /\ UNCHANGED <<scope, ackDone, committedRecv>>

(* CLIENT acknowledge() returns: its renames are done; fsync processed/. *)
AckReturns(c) ==
    /\ AckDone(c)
    /\ IF AckSyncsProcessed THEN SyncProcessed ELSE UNCHANGED dur
    /\ ackDone' = ackDone \cup scope[c]
    /\ scope' = [scope EXCEPT ![c] = {}]
    /\ UNCHANGED <<sendDone, committedRecv>>

(* A transacted consumer's point of no return: fsync processing/ (so     *)
(* roll-forward finds its claims), rename its log into committing/ and    *)
(* fsync that (logs are durable at once here).                            *)
EnterCommittingCons(c) ==
    /\ EnterCommitting(c)
    /\ IF ClaimsSyncedAtCommit
       THEN dur' = [m \in Msg |-> IF m \in logset[c] THEN FilesOf(m) ELSE dur[m]]
       ELSE UNCHANGED dur
    /\ committedRecv' = committedRecv \cup logset[c]
    /\ UNCHANGED <<sendDone, scope, ackDone>>

(* A transacted consumer's commit: every ack applied, fsync processed/,  *)
(* unlink the log, return.                                                *)
CommitConsReturns(c) ==
    /\ DeleteLogCons(c)
    /\ IF AckSyncsProcessed /\ SyncBeforeUnlink THEN SyncProcessed ELSE UNCHANGED dur
    /\ ackDone' = IF SyncBeforeUnlink THEN ackDone \cup logset[c] ELSE ackDone
    /\ UNCHANGED <<sendDone, scope, committedRecv>>

(* The kernel writes m's current entry back on its own.                  *)
Writeback(m) ==
    /\ m \in Volatile
    /\ dur' = [dur EXCEPT ![m] = FilesOf(m)]
    /\ UNCHANGED <<vars, sendDone, scope, ackDone, committedRecv>>

(* Power loss: every process dies (as Crash), and each message whose     *)
(* entry is not durable may be back at its durable one (or gone).        *)
PowerLoss ==
    /\ crashes < MaxCrashes
    /\ \E V \in SUBSET Volatile :
         fs' = {f \in fs : f.m \notin V} \cup UNION {dur[m] : m \in V}
    /\ alive' = [p \in Proc |-> FALSE]
    /\ crashes' = crashes + 1
    /\ ppc' = "idle"
    /\ listing' = [c \in Consumer |-> {}]
    /\ cpc' = [c \in Consumer |-> "idle"]
    /\ cur' = [c \in Consumer |-> NoMsg]
    /\ held' = [c \in Consumer |-> <<>>]
    /\ todo' = [c \in Consumer |-> {}]
    /\ scope' = [c \in Consumer |-> {}]
    /\ UNCHANGED <<log, logset, created, mode, expired, due, handled, deliveries, purged,
                   everNew, dur, sendDone, ackDone, committedRecv>>

(* Every other step of Dropbox leaves durability alone.  (A producer's   *)
(* DeleteLogProd is CommitReturns: it syncs target/ first; AckDone and a *)
(* consumer's DeleteLogCons are AckReturns and CommitConsReturns.)       *)
IsDeleteLogProd == ppc = "commit" /\ ppc' = "idle" /\ alive'[Prod]
IsConsumerReturn == \E c \in Consumer : cpc[c] \in {"acking", "commit"} /\ cpc'[c] = "idle" /\ alive'[c]
IsConsumerCommitPoint == \E c \in Consumer : log[c] = "associated" /\ log'[c] = "committing"
(* an acknowledge() that starts records what it acknowledges            *)
TrackScope ==
    scope' = [c \in Consumer |-> IF cpc[c] = "idle" /\ cpc'[c] = "acking" THEN todo'[c]
                                 ELSE IF cpc'[c] = "acking" THEN scope[c] ELSE {}]

PNext ==
    \/ Next /\ ~IsDeleteLogProd /\ ~IsConsumerReturn /\ ~IsConsumerCommitPoint /\ TrackScope
            /\ UNCHANGED <<dur, sendDone, ackDone, committedRecv>>
    \/ CommitReturns
    \/ \E c \in Consumer : AckReturns(c) \/ CommitConsReturns(c) \/ EnterCommittingCons(c)
    \/ \E m \in Msg : SendReturns(m) \/ Writeback(m)
    \/ PowerLoss

PSpec == PInit /\ [][PNext]_pvars

(* What send() or commit() acknowledged stays committed.                  *)
NoLossAckedSend ==
    \A m \in sendDone : AbsState(m) \notin {"ABSENT", "NOT_COMMITTED"} \/ m \in purged

(* What acknowledge() or a consumer's commit() returned for stays         *)
(* acknowledged (or is purged): never put back, never delivered again.    *)
AckedStaysAcked == \A m \in ackDone : AbsState(m) = "ACKNOWLEDGED" \/ m \in purged

(* What a consumer's commit took past its point of no return (its log    *)
(* renamed into committing/) stays acknowledged (or is purged) through a   *)
(* power loss, whether or not commit() has returned (D3): its claims are   *)
(* durable before the commit point, its log outlives the renames.          *)
CommittedRecvStays == \A m \in committedRecv : AbsState(m) = "ACKNOWLEDGED" \/ m \in purged

(* Reachability: a power loss does undo a rename.                         *)
WitnessNoUndo == \A m \in Msg : ~(In(m, "working") /\ m \in everNew /\ ~alive[Prod])
=============================================================================
