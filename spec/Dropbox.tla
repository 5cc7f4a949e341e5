------------------------------ MODULE Dropbox ------------------------------
(***************************************************************************)
(* The DropboxMQ 1.2 protocol on one queue dropbox, as the reference       *)
(* implementation executes it: the broker is a directory tree, a message   *)
(* is a file, its state is the directory holding it, and only rename(2)    *)
(* moves it.  This is the "how" (Lamport's TwoPhase) that implements the   *)
(* abstract channel of Channel.tla (his TCommit); TLC checks that as the   *)
(* property Refinement under the mapping AbsState below.                   *)
(*                                                                         *)
(* Directories:  working/ target/ processing/ processed/ expired/ error/   *)
(* and, per process, one transaction-log file in transaction/associated/,  *)
(* transaction/committing/ or transaction/rolling-back/.                   *)
(*                                                                         *)
(* Processes: one producer Prod (plain sends and the transactions Txs)     *)
(* and the consumers, each with an acknowledge mode (AUTO, DUPS_OK,        *)
(* CLIENT, TRANSACTED) chosen at start.  Any live process may crash at     *)
(* any step (at most MaxCrashes crashes in all); a recovery agent (the     *)
(* restarted process, or a sweeper that sees the owner is dead) then rolls *)
(* its transaction log forward or back and returns its in-flight messages. *)
(*                                                                         *)
(* The lifecycle actions carry the names of reference/dropboxmq/           *)
(* lifecycle.py one to one: Create Send Discard Quarantine Claim Expire    *)
(* Ack Redeliver DeadLetter Purge.  All other actions are process-level    *)
(* steps that move no message (listed in spec/README.md).                  *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
    Msg,          \* message ids (model values)
    Consumer,     \* consumer processes (model values)
    Prod,         \* the producer process (a model value)
    Txs,          \* the producer's transactions: disjoint sets of messages
    MaxDel,       \* redelivery limit: a delivery whose count is over it dead-letters
    Expiring,     \* messages that carry an expiration time
    Delayed,      \* messages that carry a delivery time (delivery delay)
    Purgeable,    \* messages the operator/housekeeping may purge (keeps models small)
    Modes,        \* Modes[c]: the acknowledge modes consumer c may run with
    MaxCrashes,   \* crash budget of a behaviour
    NoOne,        \* "no consumer" (model value)
    NoMsg         \* "no message" (model value)

Proc     == Consumer \cup {Prod}
AckModes == {"AUTO", "DUPS_OK", "CLIENT", "TRANSACTED"}
Dirs     == {"working", "target", "processing", "processed", "expired", "error"}
LogDirs  == {"none", "writing", "associated", "committing", "rolling-back"}
TxMsgs   == UNION Txs

ASSUME /\ Prod \notin Consumer /\ NoOne \notin Consumer
       /\ \A T1, T2 \in Txs : T1 = T2 \/ T1 \cap T2 = {}
       /\ \A T \in Txs : T # {}
       /\ Expiring \subseteq Msg /\ Delayed \subseteq Msg /\ Purgeable \subseteq Msg /\ MaxDel \in Nat \ {0}
       /\ \A c \in Consumer : Modes[c] \subseteq AckModes /\ Modes[c] # {}

(* A file: the message it holds, its directory, the consumer whose       *)
(* processing/<client>~<name> it is (NoOne elsewhere), n = the           *)
(* JMSXDeliveryCountI=<n> property in its name (0: absent, first         *)
(* delivery), and ok = written completely and fsynced (close_write).     *)
File == [m : Msg, d : Dirs, c : Consumer \cup {NoOne}, n : 0..MaxDel, ok : BOOLEAN]

VARIABLES
    fs,          \* the set of files under the dropbox
    log,         \* log[p]: where process p's transaction log file is
    logset,      \* logset[p]: the messages whose renames the log lists
    alive,       \* alive[p]
    ppc,         \* producer: "idle", "commit" (past the log's point of no return)
    mode,        \* mode[c]: the acknowledge mode of consumer c's session
    listing,     \* listing[c]: c's (possibly stale) listing of target/
    cpc,         \* consumer program counter
    cur,         \* cur[c]: the message c just claimed / its listener runs on
    held,        \* held[c]: messages handed to c's application, not yet acked, in order
    todo,        \* todo[c]: renames left in an acknowledge/recover/commit/rollback
    expired,     \* the messages whose expiration time has passed (the clock)
    due,         \* the messages whose delivery time has passed (the clock)
    created,     \* history: message ids used
    handled,     \* history: messages some application finished processing
    deliveries,  \* history: how often each message was handed to an application
    everNew,     \* history: messages that have been NEW (committed): set by Send
                 \* and by EnterCommitting into committing/
    purged,      \* history: messages removed by Purge
    crashes      \* history: crashes so far

vars == <<fs, log, logset, alive, ppc, mode, listing, cpc, cur, held, todo,
          expired, due, created, handled, deliveries, everNew, purged, crashes>>

CPCs == {"idle", "check", "record", "listen", "ret", "fail", "acking", "recover",
         "prepare", "commit", "rollback"}

Range(s) == {s[i] : i \in DOMAIN s}
Remove(s, m) == SelectSeq(s, LAMBDA x : x # m)
FilesOf(m) == {f \in fs : f.m = m}
Has(m) == FilesOf(m) # {}
FileOf(m) == CHOOSE f \in fs : f.m = m
In(m, d) == \E f \in fs : f.m = m /\ f.d = d
InProc(m, c) == \E f \in fs : f.m = m /\ f.d = "processing" /\ f.c = c
Holding(c) == {f.m : f \in {g \in fs : g.d = "processing" /\ g.c = c}}
NewFile(m, d) == [m |-> m, d |-> d, c |-> NoOne, n |-> 0, ok |-> FALSE]
Moved(f, d) == [f EXCEPT !.d = d, !.c = NoOne]
(* rename f to g: one atomic step *)
Rename(f, g) == fs' = (fs \ {f}) \cup {g}

(***************************************************************************)
(* The definitions the mutant configurations override (spec/mutants/).     *)
(* Each stands for one implementation decision.                            *)
(***************************************************************************)
CreateDir == "working"                 \* producer creates in working/ (mutant: target/)
ClaimFiles(f, g) == (fs \ {f}) \cup {g} \* claim = rename (mutant: copy, fs \cup {g})
AckBeforeListener == FALSE             \* AUTO acks after onMessage returns (1.2: before)
ClientAckScope(c, i) == Range(held[c]) \* acknowledge() acks all consumed (1.2: up to i)
RedeliverCount(f) == f.n + 1           \* redelivery bumps JMSXDeliveryCount (mutant: keeps it)
CommitLogDir == "committing"           \* the point of no return (mutant: stay in associated/)
RollForwardDirs == {"committing"}      \* recovery rolls these forward (mutant: {})
(* The receive side.                                                       *)
AckingPcs == {"acking", "commit"}      \* session steps that ack (mutant: + recover, rollback)
EarlyAckLogDirs == {}                  \* a commit acks before committing/ (mutant: {"associated"})
OwnerGone(c) == ~alive[c]              \* the sweep takes c's files (mutant: from a live c too)
(* Limits, the clock, and whose files a step may take.                     *)
OverLimit(f) == f.n + 1 > MaxDel       \* dead-letter a claim past the limit (mutant: >=)
SweepExpiresHeld == FALSE              \* the expiry sweep leaves processing/ alone (mutant: TRUE)
AckMatches(c, f) == f.c = c            \* acknowledge() renames processing/<client>~* (mutant: processing/*)
Ready(m) == m \notin Delayed \/ m \in due  \* claim only what is due (mutant: TRUE)

(***************************************************************************)
(* The refinement mapping: directory -> Channel state.  A file in working/ *)
(* whose transaction log is in committing/ is already committed (NEW); a   *)
(* file in processing/ whose consumer's log is in committing/ is already   *)
(* ACKNOWLEDGED.  Everything else is the directory of lifecycle.py.        *)
(***************************************************************************)
Committed(p, m) == log[p] = "committing" /\ m \in logset[p]
AbsState(m) ==
    IF ~Has(m) THEN "ABSENT"
    ELSE LET f == FileOf(m) IN
         CASE f.d = "working"    -> IF Committed(Prod, m) THEN "NEW" ELSE "NOT_COMMITTED"
           [] f.d = "target"     -> "NEW"
           [] f.d = "processing" -> IF Committed(f.c, m) THEN "ACKNOWLEDGED" ELSE "DELIVERED"
           [] f.d = "processed"  -> "ACKNOWLEDGED"
           [] f.d = "expired"    -> "EXPIRED"
           [] f.d = "error"      -> "DEAD_LETTER"
AbsOwner(m) == IF AbsState(m) = "DELIVERED" THEN FileOf(m).c ELSE NoOne
AbsRedelivered(m) == Has(m) /\ FileOf(m).n > 0
AbsCount(m) == IF Has(m) THEN FileOf(m).n + 1 ELSE 1

(* The receive side: a consumer's session is live while its process is;  *)
(* its decision is read off its program counter: the listener returned   *)
(* ("ret") or acknowledge() runs ("acking"): ack; its commit's log is    *)
(* written but not yet in committing/ ("prepare"): commit; the listener  *)
(* threw, recover() or rollback() runs: back.  The decision covers what  *)
(* it lists (the listener's message, todo, the log) and is still         *)
(* DELIVERED to the consumer.                                            *)
AbsPending(c) ==
    LET listed == CASE cpc[c] \in {"ret", "fail"}                   -> {cur[c]}
                    [] cpc[c] \in {"acking", "recover", "rollback"} -> todo[c]
                    [] cpc[c] = "prepare"                          -> logset[c]
                    [] OTHER                                       -> {}
    IN  IF ~alive[c] THEN {}
        ELSE {m \in listed : InProc(m, c) /\ ~Committed(c, m)}   \* still DELIVERED to c
AbsPhase(c) ==
    IF AbsPending(c) = {} THEN "run"
    ELSE CASE cpc[c] \in {"ret", "acking"} -> "ack"
           [] cpc[c] = "prepare"           -> "commit"
           [] OTHER                        -> "back"

Ch == INSTANCE Channel WITH
        state <- [m \in Msg |-> AbsState(m)],
        owner <- [m \in Msg |-> AbsOwner(m)],
        redelivered <- [m \in Msg |-> AbsRedelivered(m)],
        dcount <- [m \in Msg |-> AbsCount(m)],
        created <- created,
        live <- [c \in Consumer |-> alive[c]],
        phase <- [c \in Consumer |-> AbsPhase(c)],
        pending <- [c \in Consumer |-> AbsPending(c)]

Init ==
    /\ fs = {}
    /\ log = [p \in Proc |-> "none"]
    /\ logset = [p \in Proc |-> {}]
    /\ alive = [p \in Proc |-> TRUE]
    /\ ppc = "idle"
    /\ mode \in {f \in [Consumer -> AckModes] : \A c \in Consumer : f[c] \in Modes[c]}
    /\ listing = [c \in Consumer |-> {}]
    /\ cpc = [c \in Consumer |-> "idle"]
    /\ cur = [c \in Consumer |-> NoMsg]
    /\ held = [c \in Consumer |-> <<>>]
    /\ todo = [c \in Consumer |-> {}]
    /\ expired = {}
    /\ due = {}
    /\ created = {}
    /\ handled = {}
    /\ deliveries = [m \in Msg |-> 0]
    /\ everNew = {}
    /\ purged = {}
    /\ crashes = 0

Local == <<ppc, listing, cpc, cur, held, todo>>
Env == <<mode, expired, due, handled, deliveries, purged, crashes, everNew>>
EnvSent == <<mode, expired, due, handled, deliveries, purged, crashes>>

(***************************************************************************)
(*                          THE PRODUCER                                   *)
(***************************************************************************)

(* Create: open(working/<name>, O_CREAT|O_EXCL|O_NOFOLLOW).  A fresh     *)
(* message id: the name cannot exist.  A transacted send is in the log   *)
(* before its file exists (WriteLog / AppendLog): every working/ file of *)
(* a transaction is attributed to its log, whenever the producer dies.   *)
Create(m) ==
    /\ alive[Prod]
    /\ m \notin created
    /\ m \in TxMsgs => log[Prod] = "writing" /\ m \in logset[Prod]
    /\ fs' = fs \cup {NewFile(m, CreateDir)}
    /\ created' = created \cup {m}
    /\ UNCHANGED <<log, logset, alive, Local, Env>>

(* CloseWrite: write the body fully (short writes retried), fsync, close.*)
(* It may happen more than once before Send: 1.2 creates the file,       *)
(* closes it, reopens it, writes the body and closes it again.           *)
CloseWrite(m) ==
    /\ alive[Prod]
    /\ \E f \in fs : f.m = m /\ f.d = CreateDir
                     /\ Rename(f, [f EXCEPT !.ok = TRUE])
    /\ UNCHANGED <<log, logset, alive, created, Local, Env>>

(* Send: rename working/<name> -> target/<name> without replacing, then  *)
(* fsync target/.  For a plain send right after CloseWrite; for a        *)
(* transaction only once its log is past the point of no return (by the  *)
(* producer, or by recovery rolling the log forward).                    *)
SendFile(m) ==
    /\ \E f \in fs : f.m = m /\ f.d = "working" /\ f.ok /\ Rename(f, Moved(f, "target"))
    /\ UNCHANGED <<created>>

Send(m) ==
    /\ \/ alive[Prod] /\ m \notin TxMsgs
       \/ alive[Prod] /\ ppc = "commit" /\ m \in logset[Prod]
       \/ ~alive[Prod] /\ log[Prod] \in RollForwardDirs /\ m \in logset[Prod]
    /\ SendFile(m)
    /\ everNew' = everNew \cup {m}
    /\ UNCHANGED <<log, logset, alive, Local, EnvSent>>

(* The log as the reference (and 1.2's layout) writes it: created in     *)
(* transaction/associated/ by the FIRST send of a transaction, one line  *)
(* appended per send (before the send's file is created), closed and     *)
(* fsynced by commit() or rollback(), then renamed.  log = "writing":   *)
(* in associated/, still open for appending.                             *)

(* WriteLog: the first send m of a transaction creates the log (OPEN).   *)
WriteLog(m) ==
    /\ alive[Prod] /\ ppc = "idle" /\ log[Prod] = "none"
    /\ m \in TxMsgs /\ m \notin created
    /\ log' = [log EXCEPT ![Prod] = "writing"]
    /\ logset' = [logset EXCEPT ![Prod] = {m}]
    /\ UNCHANGED <<fs, alive, created, Local, Env>>

(* AppendLog: a later send m of the same transaction appends its line:  *)
(* the log's directory does not change (no file event).                 *)
AppendLog(m) ==
    /\ alive[Prod] /\ log[Prod] = "writing"
    /\ m \notin created /\ m \notin logset[Prod]
    /\ \E T \in Txs : m \in T /\ logset[Prod] \subseteq T
    /\ logset' = [logset EXCEPT ![Prod] = @ \cup {m}]
    /\ UNCHANGED <<fs, log, alive, created, Local, Env>>

(* CloseLog: commit() or rollback() closes the log, written and fsynced  *)
(* (close_write).  The producer's listed files are all written; a        *)
(* consumer's commit/rollback starts here: its decision is made (cpc     *)
(* "prepare"): EnterCommitting, or AbortCommit for a rollback.           *)
CloseLog(p) ==
    /\ alive[p] /\ log[p] = "writing"
    /\ log' = [log EXCEPT ![p] = "associated"]
    /\ IF p = Prod
       THEN /\ \A m \in logset[p] : In(m, "working") /\ FileOf(m).ok
            /\ UNCHANGED Local
       ELSE /\ cpc[p] = "idle" /\ held[p] # <<>>
            /\ cpc' = [cpc EXCEPT ![p] = "prepare"]
            /\ UNCHANGED <<ppc, listing, cur, held, todo>>
    /\ UNCHANGED <<fs, logset, alive, created, Env>>

(* EnterCommitting: rename the log associated/ -> committing/ and fsync  *)
(* transaction/committing/: THE POINT OF NO RETURN.  From here on the    *)
(* transaction is committed whatever crashes: recovery rolls it forward. *)
(* A consumer's commit then has the renames of its log to apply (todo).  *)
EnterCommitting(p) ==
    /\ alive[p] /\ log[p] = "associated"
    /\ p = Prod => logset[p] \in Txs      \* a producer commits a whole transaction
    /\ log' = [log EXCEPT ![p] = CommitLogDir]
    /\ \/ p = Prod /\ ppc = "idle" /\ ppc' = "commit" /\ UNCHANGED <<cpc, todo>>
       \/ p # Prod /\ cpc[p] = "prepare"
          /\ cpc' = [cpc EXCEPT ![p] = "commit"]
          /\ todo' = [todo EXCEPT ![p] = logset[p]]
          /\ UNCHANGED ppc
    /\ everNew' = IF p = Prod /\ log'[p] = "committing" THEN everNew \cup logset[p] ELSE everNew
    /\ UNCHANGED <<fs, logset, alive, created, listing, cur, held, EnvSent>>

(* DeleteLog: every rename of the log is applied: unlink the log.        *)
DeleteLogProd ==
    /\ alive[Prod] /\ ppc = "commit"
    /\ \A m \in logset[Prod] : ~In(m, "working")
    /\ log' = [log EXCEPT ![Prod] = "none"]
    /\ logset' = [logset EXCEPT ![Prod] = {}]
    /\ ppc' = "idle"
    /\ UNCHANGED <<fs, alive, created, listing, cpc, cur, held, todo, Env>>

(* Discard: unlink working/<name>.  By the producer: rollback of a       *)
(* transaction whose log it renamed into rolling-back/; by recovery: rollback of a dead producer's log that is *)
(* not in committing/, or the orphan sweep of a dead producer's working/ *)
(* files that no committing log lists.                                   *)
Discard(m) ==
    /\ \/ alive[Prod] /\ log[Prod] = "rolling-back" /\ m \in logset[Prod]
       \/ ~alive[Prod] /\ (log[Prod] \notin RollForwardDirs \/ m \notin logset[Prod])
    /\ \E f \in fs : f.m = m /\ f.d = "working" /\ fs' = fs \ {f}
    /\ UNCHANGED <<log, logset, alive, created, Local, Env>>

(* Quarantine: the orphan sweep keeps a dead producer's (possibly torn)  *)
(* working/ file for an operator: rename working/ -> error/.            *)
Quarantine(m) ==
    /\ ~alive[Prod] /\ (log[Prod] \notin RollForwardDirs \/ m \notin logset[Prod])
    /\ \E f \in fs : f.m = m /\ f.d = "working" /\ Rename(f, Moved(f, "error"))
    /\ UNCHANGED <<log, logset, alive, created, Local, Env>>

(* AbortCommit: commit failed before the point of no return (ENOSPC...): *)
(* rename the log associated/ -> rolling-back/.                         *)
AbortCommit(p) ==
    /\ alive[p] /\ log[p] = "associated"
    /\ (p = Prod /\ ppc = "idle") \/ (p # Prod /\ cpc[p] = "prepare")
    /\ log' = [log EXCEPT ![p] = "rolling-back"]
    /\ IF p = Prod THEN UNCHANGED <<cpc, todo>>
       ELSE /\ cpc' = [cpc EXCEPT ![p] = "rollback"]
            /\ todo' = [todo EXCEPT ![p] = logset[p]]
    /\ UNCHANGED <<fs, logset, alive, created, ppc, listing, cur, held, Env>>

(* DeleteRolledBackLog: the rollback through rolling-back/ has undone   *)
(* every rename (Discard / Redeliver): unlink the log.                   *)
DeleteRolledBackLog(p) ==
    /\ alive[p] /\ log[p] = "rolling-back"
    /\ IF p = Prod THEN \A m \in logset[p] : ~In(m, "working")
                   ELSE cpc[p] = "rollback" /\ todo[p] = {}
    /\ log' = [log EXCEPT ![p] = "none"]
    /\ logset' = [logset EXCEPT ![p] = {}]
    /\ IF p = Prod THEN UNCHANGED <<cpc, held>>
       ELSE /\ cpc' = [cpc EXCEPT ![p] = "idle"]
            /\ held' = [held EXCEPT ![p] = <<>>]
    /\ UNCHANGED <<fs, alive, created, ppc, listing, cur, todo, Env>>

(***************************************************************************)
(*                          THE CONSUMERS                                  *)
(***************************************************************************)
AutoLike(c) == mode[c] \in {"AUTO", "DUPS_OK"}

(* List: readdir(target/): a snapshot that may be stale at once.        *)
List(c) ==
    /\ alive[c] /\ cpc[c] = "idle"
    /\ listing' = [listing EXCEPT ![c] = {f.m : f \in {g \in fs : g.d = "target"}}]
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, cpc, cur, held, todo, Env>>

(* Claim: rename target/<name> -> processing/<client>~<name>.  Exactly  *)
(* one of several competing consumers succeeds.  The consumer reads the *)
(* delivery time from the name first and leaves a message that is not   *)
(* due yet (decision.py: DEFER).                                         *)
Claim(c, m) ==
    /\ alive[c] /\ cpc[c] = "idle" /\ m \in listing[c]
    /\ Ready(m)
    /\ \E f \in fs : /\ f.m = m /\ f.d = "target"
                     /\ fs' = ClaimFiles(f, [f EXCEPT !.d = "processing", !.c = c])
    /\ listing' = [listing EXCEPT ![c] = @ \ {m}]
    /\ cpc' = [cpc EXCEPT ![c] = "check"]
    /\ cur' = [cur EXCEPT ![c] = m]
    /\ UNCHANGED <<log, logset, alive, created, ppc, held, todo, Env>>

(* LoseRace: the rename of a stale listing entry fails with ENOENT:      *)
(* somebody else claimed (or expired, or purged) it.  Normal and silent. *)
LoseRace(c, m) ==
    /\ alive[c] /\ cpc[c] = "idle" /\ m \in listing[c]
    /\ ~In(m, "target")
    /\ listing' = [listing EXCEPT ![c] = @ \ {m}]
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, cpc, cur, held, todo, Env>>

(* Deliver: the claimed file is read, decoded, found neither expired nor *)
(* over the redelivery limit, and handed to the application: receive()   *)
(* returns it, or onMessage() is called with it.  CLIENT and TRANSACTED  *)
(* applications process it at once (handled); an AUTO/DUPS_OK listener   *)
(* is now running; a TRANSACTED receive is recorded in the log next     *)
(* ("record": WriteLogCons / AppendLogCons) before receive() returns.    *)
Deliver(c) ==
    LET m == cur[c] IN
    /\ alive[c] /\ cpc[c] = "check"
    /\ m \notin expired
    /\ \E f \in fs : f.m = m /\ f.d = "processing" /\ f.c = c /\ f.n + 1 <= MaxDel
    /\ deliveries' = [deliveries EXCEPT ![m] = @ + 1]
    /\ held' = [held EXCEPT ![c] = Append(@, m)]
    /\ IF AutoLike(c)
       THEN /\ cpc' = [cpc EXCEPT ![c] = "listen"]
            /\ UNCHANGED handled
            /\ IF AckBeforeListener    \* 1.2: renamed to processed/ first
               THEN \E f \in fs : f.m = m /\ f.d = "processing" /\ Rename(f, Moved(f, "processed"))
               ELSE UNCHANGED fs
       ELSE /\ cpc' = [cpc EXCEPT ![c] = IF mode[c] = "TRANSACTED" THEN "record" ELSE "idle"]
            /\ handled' = handled \cup {m}
            /\ UNCHANGED fs
    /\ UNCHANGED <<log, logset, alive, created, ppc, listing, cur, todo,
                   mode, expired, due, purged, crashes, everNew>>

(* ListenerReturns / ListenerThrows: onMessage() (or the code after      *)
(* receive() in AUTO mode) returns normally, or throws.  Next comes the  *)
(* Ack or the Redeliver rename -- unless the file was already moved to   *)
(* processed/ before the listener ran (AckBeforeListener, 1.2): then     *)
(* there is nothing left to do.                                          *)
Finish(c, next) ==
    IF InProc(cur[c], c)
    THEN /\ cpc' = [cpc EXCEPT ![c] = next] /\ UNCHANGED <<held, cur>>
    ELSE /\ cpc' = [cpc EXCEPT ![c] = "idle"]
         /\ held' = [held EXCEPT ![c] = <<>>]
         /\ cur' = [cur EXCEPT ![c] = NoMsg]
ListenerReturns(c) ==
    /\ alive[c] /\ cpc[c] = "listen"
    /\ handled' = handled \cup {cur[c]}
    /\ Finish(c, "ret")
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, listing, todo,
                   mode, expired, due, deliveries, purged, crashes, everNew>>

ListenerThrows(c) ==
    /\ alive[c] /\ cpc[c] = "listen"
    /\ Finish(c, "fail")
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, listing, todo, Env>>

(* Acknowledge: CLIENT mode acknowledge(): the renames to do are        *)
(* ClientAckScope (all consumed messages), plus any other processing/    *)
(* file its name pattern matches (Strays: none, the pattern carries the  *)
(* client prefix); the call returns when they are done (AckDone).        *)
Strays(c) == {f.m : f \in {g \in fs : g.d = "processing" /\ g.c # c /\ AckMatches(c, g)}}
Acknowledge(c, i) ==
    /\ alive[c] /\ cpc[c] = "idle" /\ mode[c] = "CLIENT"
    /\ i \in 1..Len(held[c])
    /\ cpc' = [cpc EXCEPT ![c] = "acking"]
    /\ todo' = [todo EXCEPT ![c] = ClientAckScope(c, i) \cup Strays(c)]
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, listing, cur, held, Env>>

AckDone(c) ==
    /\ alive[c] /\ cpc[c] = "acking" /\ todo[c] = {}
    /\ cpc' = [cpc EXCEPT ![c] = "idle"]
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, listing, cur, held, todo, Env>>

(* Recover: session.recover() (CLIENT): every unacknowledged message is *)
(* redelivered (Redeliver, below), then the call returns (RecoverDone).  *)
(* (A transacted session's rollback() goes through its log: CloseLog,    *)
(* AbortCommit, Redeliver, DeleteRolledBackLog.)                          *)
Recover(c) ==
    /\ alive[c] /\ cpc[c] = "idle" /\ mode[c] = "CLIENT"
    /\ held[c] # <<>>
    /\ cpc' = [cpc EXCEPT ![c] = "recover"]
    /\ todo' = [todo EXCEPT ![c] = Range(held[c])]
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, listing, cur, held, Env>>

RecoverDone(c) ==
    /\ alive[c] /\ cpc[c] = "recover" /\ todo[c] = {}
    /\ cpc' = [cpc EXCEPT ![c] = "idle"]
    /\ held' = [held EXCEPT ![c] = <<>>]
    /\ UNCHANGED <<fs, log, logset, alive, created, ppc, listing, cur, todo, Env>>

(* A transacted consumer records each receive in its log before         *)
(* receive() returns: the first one of a transaction creates the log in  *)
(* associated/ (WriteLogCons, OPEN), the later ones append a line        *)
(* (AppendLogCons).  commit() and rollback() then close it (CloseLog).   *)
WriteLogCons(c) ==
    /\ alive[c] /\ cpc[c] = "record" /\ log[c] = "none"
    /\ log' = [log EXCEPT ![c] = "writing"]
    /\ logset' = [logset EXCEPT ![c] = {cur[c]}]
    /\ cpc' = [cpc EXCEPT ![c] = "idle"]
    /\ UNCHANGED <<fs, alive, created, ppc, listing, cur, held, todo, Env>>

AppendLogCons(c) ==
    /\ alive[c] /\ cpc[c] = "record" /\ log[c] = "writing"
    /\ logset' = [logset EXCEPT ![c] = @ \cup {cur[c]}]
    /\ cpc' = [cpc EXCEPT ![c] = "idle"]
    /\ UNCHANGED <<fs, log, alive, created, ppc, listing, cur, held, todo, Env>>

DeleteLogCons(c) ==
    /\ alive[c] /\ cpc[c] = "commit" /\ todo[c] = {}
    /\ log' = [log EXCEPT ![c] = "none"]
    /\ logset' = [logset EXCEPT ![c] = {}]
    /\ cpc' = [cpc EXCEPT ![c] = "idle"]
    /\ held' = [held EXCEPT ![c] = <<>>]
    /\ UNCHANGED <<fs, alive, created, ppc, listing, cur, todo, Env>>

(* Ack: rename processing/<client>~<name> -> processed/<name>.  By an   *)
(* AUTO/DUPS_OK consumer after its listener returned; by acknowledge()  *)
(* (CLIENT); by a commit past its point of no return (TRANSACTED); and  *)
(* by recovery rolling a dead consumer's committing/ log forward.       *)
Ack(c, m) ==
    /\ \/ alive[c] /\ cpc[c] = "ret" /\ cur[c] = m
          /\ cpc' = [cpc EXCEPT ![c] = "idle"]
          /\ held' = [held EXCEPT ![c] = <<>>]
          /\ cur' = [cur EXCEPT ![c] = NoMsg]
          /\ UNCHANGED todo
       \/ alive[c] /\ cpc[c] \in AckingPcs /\ m \in todo[c]
          /\ todo' = [todo EXCEPT ![c] = @ \ {m}]
          /\ held' = [held EXCEPT ![c] = IF cpc[c] = "acking" THEN Remove(@, m) ELSE @]
          /\ UNCHANGED <<cpc, cur>>
       \/ ~alive[c] /\ log[c] \in RollForwardDirs /\ m \in logset[c]
          /\ UNCHANGED <<cpc, cur, held, todo>>
       \/ alive[c] /\ cpc[c] = "prepare" /\ log[c] \in EarlyAckLogDirs /\ m \in logset[c]
          /\ UNCHANGED <<cpc, cur, held, todo>>
    /\ \E f \in fs : f.m = m /\ f.d = "processing" /\ AckMatches(c, f)
                     /\ Rename(f, Moved(f, "processed"))
    /\ UNCHANGED <<log, logset, alive, created, ppc, listing, Env>>

(* Redeliver: rename processing/<client>~<name> -> target/<name'> where  *)
(* name' carries JMSXDeliveryCountI=<n+1>: NEW again, redelivered.  By   *)
(* a listener failure (AUTO/DUPS_OK), recover(), rollback(), and by      *)
(* recovery of a dead consumer (rolling back its log, or sweeping its    *)
(* orphaned processing/ entries).                                        *)
Redeliver(c, m) ==
    /\ InProc(m, c)
    /\ \/ alive[c] /\ cpc[c] = "fail" /\ cur[c] = m
          /\ cpc' = [cpc EXCEPT ![c] = "idle"]
          /\ held' = [held EXCEPT ![c] = <<>>]
          /\ cur' = [cur EXCEPT ![c] = NoMsg]
          /\ UNCHANGED todo
       \/ alive[c] /\ cpc[c] \in {"recover", "rollback"} /\ m \in todo[c]
          /\ todo' = [todo EXCEPT ![c] = @ \ {m}]
          /\ held' = [held EXCEPT ![c] = Remove(@, m)]
          /\ UNCHANGED <<cpc, cur>>
       \/ OwnerGone(c) /\ (log[c] \notin RollForwardDirs \/ m \notin logset[c])
          /\ UNCHANGED <<cpc, cur, held, todo>>
    /\ \E f \in fs : /\ f.m = m /\ f.d = "processing" /\ f.c = c
                     /\ f.n + 1 <= MaxDel
                     /\ Rename(f, [Moved(f, "target") EXCEPT !.n = RedeliverCount(f)])
    /\ UNCHANGED <<log, logset, alive, created, ppc, listing, Env>>

(* Expire: rename target/ -> expired/ by the expiry sweep (or a consumer *)
(* that notices before claiming), or processing/ -> expired/ by the      *)
(* consumer that notices right after its claim, before it delivers it.  *)
(* Nobody else takes a claimed file to expired/: the sweep reads target/. *)
Expire(m) ==
    /\ m \in expired
    /\ \/ \E f \in fs : f.m = m /\ f.d = "target" /\ Rename(f, Moved(f, "expired"))
          /\ UNCHANGED <<cpc, cur>>
       \/ \E c \in Consumer :
            /\ alive[c] /\ cpc[c] = "check" /\ cur[c] = m
            /\ \E f \in fs : f.m = m /\ f.d = "processing" /\ f.c = c
                             /\ Rename(f, Moved(f, "expired"))
            /\ cpc' = [cpc EXCEPT ![c] = "idle"]
            /\ cur' = [cur EXCEPT ![c] = NoMsg]
       \/ SweepExpiresHeld   \* (never: a claimed file is its holder's alone)
          /\ \E f \in fs : f.m = m /\ f.d = "processing" /\ Rename(f, Moved(f, "expired"))
          /\ UNCHANGED <<cpc, cur>>
    /\ UNCHANGED <<log, logset, alive, created, ppc, listing, held, todo, Env>>

(* DeadLetter: rename processing/ -> error/: the claimed message's       *)
(* delivery count is over MaxDel (noticed by the consumer right after    *)
(* its claim, or by recovery sweeping a dead consumer's processing/).    *)
DeadLetter(c, m) ==
    /\ \E f \in fs : /\ f.m = m /\ f.d = "processing" /\ f.c = c
                     /\ OverLimit(f)
                     /\ Rename(f, Moved(f, "error"))
    /\ \/ alive[c] /\ cpc[c] = "check" /\ cur[c] = m
          /\ cpc' = [cpc EXCEPT ![c] = "idle"]
          /\ cur' = [cur EXCEPT ![c] = NoMsg]
       \/ ~alive[c] /\ UNCHANGED <<cpc, cur>>
    /\ UNCHANGED <<log, logset, alive, created, ppc, listing, held, todo, Env>>

(* Purge: unlink a file of target/ (operator purge), or of processed/,   *)
(* expired/, error/ (housekeeping).                                      *)
Purge(m) ==
    /\ m \in Purgeable
    /\ \E f \in fs : f.m = m /\ f.d \in {"target", "processed", "expired", "error"}
                     /\ fs' = fs \ {f}
    /\ purged' = purged \cup {m}
    /\ UNCHANGED <<log, logset, alive, created, Local, mode, expired, due, handled,
                   deliveries, crashes, everNew>>

(***************************************************************************)
(*                  TIME, CRASHES AND RECOVERY                             *)
(***************************************************************************)

(* Tick: the clock passes message m's expiration time.                   *)
Tick(m) ==
    /\ m \in Expiring \ expired
    /\ expired' = expired \cup {m}
    /\ UNCHANGED <<fs, log, logset, alive, created, Local, mode, due, handled,
                   deliveries, purged, crashes, everNew>>

(* TickDue: the clock passes message m's delivery time.                 *)
TickDue(m) ==
    /\ m \in Delayed \ due
    /\ due' = due \cup {m}
    /\ UNCHANGED <<fs, log, logset, alive, created, Local, mode, expired, handled,
                   deliveries, purged, crashes, everNew>>

(* Crash: process p dies (kill -9, power loss).  Its memory is gone;     *)
(* its files and its log file stay where they are.                       *)
Crash(p) ==
    /\ alive[p] /\ crashes < MaxCrashes
    /\ alive' = [alive EXCEPT ![p] = FALSE]
    /\ crashes' = crashes + 1
    /\ IF p = Prod THEN ppc' = "idle" /\ UNCHANGED <<listing, cpc, cur, held, todo>>
       ELSE /\ listing' = [listing EXCEPT ![p] = {}]
            /\ cpc' = [cpc EXCEPT ![p] = "idle"]
            /\ cur' = [cur EXCEPT ![p] = NoMsg]
            /\ held' = [held EXCEPT ![p] = <<>>]
            /\ todo' = [todo EXCEPT ![p] = {}]
            /\ UNCHANGED ppc
    /\ UNCHANGED <<fs, log, logset, created, mode, expired, due, handled, deliveries, purged, everNew>>

(* RecoverLog: recovery of dead process p found its log and has applied *)
(* (roll forward) or undone (roll back) every rename it lists: unlink   *)
(* the log.  The renames themselves are Send/Ack (forward) and          *)
(* Discard/Redeliver (back).                                             *)
RecoverLog(p) ==
    /\ ~alive[p] /\ log[p] # "none"
    /\ IF p = Prod THEN \A m \in logset[p] : ~In(m, "working")
                   ELSE \A m \in logset[p] : ~InProc(m, p)
    /\ log' = [log EXCEPT ![p] = "none"]
    /\ logset' = [logset EXCEPT ![p] = {}]
    /\ UNCHANGED <<fs, alive, created, Local, Env>>

(* Restart: a dead consumer whose log is gone and whose processing/      *)
(* entries have all been returned starts again with a fresh session.     *)
Restart(c) ==
    /\ ~alive[c] /\ log[c] = "none" /\ Holding(c) = {}
    /\ alive' = [alive EXCEPT ![c] = TRUE]
    /\ UNCHANGED <<fs, log, logset, created, Local, Env>>

(***************************************************************************)
(*                              NEXT                                       *)
(***************************************************************************)
ProducerNext ==
    \/ \E m \in Msg : Create(m) \/ CloseWrite(m) \/ Send(m) \/ Discard(m)
    \/ \E m \in Msg : WriteLog(m) \/ AppendLog(m)
    \/ CloseLog(Prod) \/ EnterCommitting(Prod) \/ DeleteLogProd
    \/ AbortCommit(Prod) \/ DeleteRolledBackLog(Prod)

ConsumerNext(c) ==
    \/ List(c)
    \/ \E m \in Msg : Claim(c, m) \/ LoseRace(c, m) \/ Ack(c, m) \/ Redeliver(c, m)
                      \/ DeadLetter(c, m)
    \/ Deliver(c) \/ ListenerReturns(c) \/ ListenerThrows(c)
    \/ \E i \in 1..Cardinality(Msg) : Acknowledge(c, i)
    \/ AckDone(c) \/ Recover(c) \/ RecoverDone(c)
    \/ WriteLogCons(c) \/ AppendLogCons(c) \/ CloseLog(c) \/ EnterCommitting(c) \/ DeleteLogCons(c)
    \/ AbortCommit(c) \/ DeleteRolledBackLog(c)

RecoveryNext(p) ==
    \/ RecoverLog(p)
    \/ p = Prod /\ \E m \in Msg : Send(m) \/ Discard(m) \/ Quarantine(m)
    \/ p # Prod /\ \E m \in Msg : Ack(p, m) \/ Redeliver(p, m) \/ DeadLetter(p, m)
    \/ p # Prod /\ Restart(p)

ExpireNext == \E m \in Msg : Expire(m)

(* ProducerNext and ConsumerNext(c) already contain the recovery renames *)
(* of a dead process (their ~alive branches); written out so that TLC's  *)
(* coverage report names every action.                                   *)
Step ==
    \/ ProducerNext
    \/ \E c \in Consumer : ConsumerNext(c) \/ Restart(c)
    \/ \E p \in Proc : RecoverLog(p) \/ Crash(p)
    \/ \E m \in Msg : Quarantine(m) \/ Tick(m) \/ TickDue(m) \/ Expire(m) \/ Purge(m)

Next == Step

Fairness ==
    /\ WF_vars(ProducerNext)
    /\ \A c \in Consumer : WF_vars(ConsumerNext(c))
    /\ \A p \in Proc : WF_vars(RecoveryNext(p))

Spec == Init /\ [][Next]_vars
FairSpec == Spec /\ Fairness

(***************************************************************************)
(*                            PROPERTIES                                   *)
(***************************************************************************)
TypeOK ==
    /\ fs \subseteq File
    /\ log \in [Proc -> LogDirs]
    /\ logset \in [Proc -> SUBSET Msg]
    /\ alive \in [Proc -> BOOLEAN]
    /\ ppc \in {"idle", "commit"}
    /\ mode \in [Consumer -> AckModes]
    /\ listing \in [Consumer -> SUBSET Msg]
    /\ cpc \in [Consumer -> CPCs]
    /\ cur \in [Consumer -> Msg \cup {NoMsg}]
    /\ \A c \in Consumer : Range(held[c]) \subseteq Msg /\ Len(held[c]) <= Cardinality(Msg)
    /\ todo \in [Consumer -> SUBSET Msg]
    /\ expired \subseteq Expiring /\ due \subseteq Delayed
    /\ created \subseteq Msg /\ handled \subseteq Msg
    /\ deliveries \in [Msg -> 0..(MaxDel + 1)]
    /\ everNew \subseteq Msg /\ purged \subseteq Msg
    /\ crashes \in 0..MaxCrashes

(* Each message is in exactly one state: at most one file holds it (no   *)
(* file: ABSENT).                                                        *)
OneState == \A m \in Msg : Cardinality(FilesOf(m)) <= 1

(* No message is delivered to two consumers at once.                     *)
NoDoubleDelivery ==
    \A c1, c2 \in Consumer : \A m \in Msg :
        (c1 # c2 /\ m \in Range(held[c1])) => m \notin Range(held[c2])

(* Only complete (written and fsynced) files are ever visible to a       *)
(* consumer.                                                             *)
CompleteBeforeVisible ==
    \A f \in fs : f.d \in {"target", "processing", "processed", "expired"} => f.ok

(* A message is delivered again only after a Redeliver (crash recovery,  *)
(* recover, rollback, listener failure), and then its name carries the   *)
(* redelivered count: the count in the name is never behind the number   *)
(* of deliveries.                                                        *)
RedeliveredFlag ==
    \A f \in fs :
        /\ f.d = "target" => deliveries[f.m] <= f.n
        /\ f.d = "processing" => deliveries[f.m] <= f.n + 1

(* A message is acknowledged only after an application processed it.    *)
AckOnlyAfterProcessed ==
    \A m \in Msg : AbsState(m) = "ACKNOWLEDGED" => m \in handled

(* No message lost: a committed message is held somewhere (NEW,          *)
(* DELIVERED or terminal) unless Purge removed it.                       *)
NoLoss == \A m \in everNew : AbsState(m) # "ABSENT" \/ m \in purged

(* Transaction atomicity: once a send of T is NEW, T's commit record     *)
(* exists (its log is past the point of no return) or all of T is        *)
(* committed; after recovery completes all of T has been NEW or none.   *)
TxAtomicity ==
    \A T \in Txs :
        /\ (\E m \in T : In(m, "target") \/ m \in everNew) =>
               \/ Committed(Prod, CHOOSE m \in T : TRUE)
               \/ \A m \in T : m \in everNew
        /\ (log[Prod] = "none" /\ ppc = "idle") =>
               \/ \A m \in T : m \in everNew
               \/ \A m \in T : m \notin everNew

(* Expired messages are never handed to an application.                 *)
ExpiredNeverDelivered ==
    [][\A m \in Msg : deliveries'[m] > deliveries[m] => m \notin expired]_vars

(* CLIENT acknowledge() returns only when every consumed message of the   *)
(* session is acknowledged.                                              *)
ClientAckAll ==
    [][\A c \in Consumer : (cpc[c] = "acking" /\ cpc'[c] = "idle") => held'[c] = <<>>]_vars

(* The delivery limit: a message is dead-lettered for its count only    *)
(* when the delivery it would make (JMSXDeliveryCount = n + 1, Channel's *)
(* dcount) is past MaxDel: the last delivery the limit allows is made.   *)
(* (DELIVERED -> DEAD_LETTER is processing/ -> error/; written on the    *)
(* files, it costs TLC no CHOOSE per message and step.)                  *)
DeadLetterOnlyOverLimit ==
    [][\A f \in fs : (f.d = "processing" /\ \E g \in fs' : g.m = f.m /\ g.d = "error")
                     => f.n + 1 > MaxDel]_vars

(* Expiry never takes a message from a live session that holds it: a     *)
(* claimed file goes to expired/ only by its own consumer, right after   *)
(* its claim and before it is handed to the application.                 *)
ExpiryNotFromHolder ==
    [][\A f \in fs : (f.d = "processing" /\ \E g \in fs' : g.m = f.m /\ g.d = "expired")
                     => alive[f.c] /\ cpc[f.c] = "check" /\ cur[f.c] = f.m]_vars

(* Delivery delay: no message is handed to an application before its     *)
(* delivery time.                                                        *)
NoEarlyDelivery ==
    [][\A m \in Msg : deliveries'[m] > deliveries[m] => m \notin Delayed \/ m \in due]_vars

(* Dropbox implements Channel: Ch!Spec, with the stuttering case first   *)
(* (most Dropbox steps move no message; TLC tries disjuncts in order).  *)
Refinement == Ch!Init /\ [][UNCHANGED Ch!cvars \/ Ch!Next]_vars
ChannelInvariants == Ch!TypeOK /\ Ch!OneOwner /\ Ch!FlagMatchesCount /\ Ch!TxAtomic
                     /\ Ch!PendingDelivered

(* The receive side, named (each is also part of Refinement): a message  *)
(* is acknowledged only by its live owner's acknowledge(), commit or     *)
(* returned listener, and only if that decision covers it; ...           *)
NoSpuriousAck == [][Ch!AckJustified]_vars
(* ... put back only by recover(), rollback(), a listener that threw, or *)
(* because its owner is dead; ...                                        *)
NoSpuriousRedelivery == [][Ch!RedeliveryJustified]_vars
(* ... and a transacted consumer's commit acknowledges all its receives  *)
(* in one step (its log entering committing/), or none of them.          *)
ReceiveTxAtomicity == [][Ch!ReceiveTxAllOrNothing]_vars

(* Liveness: every NEW message is eventually consumed: acknowledged,     *)
(* expired, dead-lettered (or purged by the operator).                   *)
EventuallyConsumed ==
    \A m \in Msg : (AbsState(m) = "NEW") ~> (AbsState(m) \in Ch!Terminal \cup {"ABSENT"})

(* Every committed message eventually reaches a terminal state.          *)
CommittedEventuallyTerminal ==
    \A m \in Msg : (m \in everNew) ~> (AbsState(m) \in Ch!Terminal \/ m \in purged)

(***************************************************************************)
(* Witnesses: invariants that must be VIOLATED (TLC prints the trace that  *)
(* shows the behaviour is reachable).                                      *)
(***************************************************************************)
WitnessNoRedelivery == \A m \in Msg : deliveries[m] <= 1
WitnessNoDeadLetter == \A f \in fs : ~(f.d = "error" /\ f.n >= MaxDel)
WitnessNoRollForward ==
    ~(~alive[Prod] /\ log[Prod] = "committing" /\ \E m \in logset[Prod] : In(m, "target"))
WitnessNoTxCommit == \A T \in Txs : \E m \in T : m \notin everNew

Symmetry == Permutations(Consumer)
(***************************************************************************)
(* TLC figures (TLC 2.15, Java 17, 1 worker per model, two models at a     *)
(* time, 2 cores shared with other test suites), `dropboxmq spec check`,  *)
(* 2026-11-22 (at load ~10 the same runs took 3-4x longer):                *)
(*                                                                         *)
(*   model               distinct states   seconds   result                *)
(*   safety_race              13,586         21.8    ok (symmetry)         *)
(*   safety_tx                14,886         18.6    ok                    *)
(*   safety_client_tx          2,492          5.4    ok                    *)
(*   liveness_auto             4,090         17.1    ok (FairSpec)         *)
(*   liveness_client_tx          872          7.4    ok (FairSpec)         *)
(*   simulate_big          (random walks)    27.7    ok (25 s time box)    *)
(*   whole CI set incl. mutants/witnesses: 29 passed, 0 failed, 1 min 21 s *)
(*   --deep (1 worker, two at a time, at load ~10):                        *)
(*   deep_race  (MaxDel 2, purge)    50,818        182.4    ok (symmetry)  *)
(*   deep_liveness (tx of two)       32,180        339.5    ok (FairSpec)  *)
(*   deep_safety (CLIENT vs TRANSACTED, 76,129        87.9    ok (2 workers) *)
(*     tx of two, expiry)                                                  *)
(***************************************************************************)
=============================================================================
