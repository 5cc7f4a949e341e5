-------------------------- MODULE TwoPhaseDropbox --------------------------
(***************************************************************************)
(* A dropbox session as a two-phase-commit resource (reference/            *)
(* dropboxmq_xa), driven with a database branch by the coordinator of      *)
(* dropboxmq_xa/coordinator.py, with crashes and recovery.                 *)
(*                                                                         *)
(* The dropbox branch is a set of file moves Moves (its sends and          *)
(* receives).  Its log lives in one directory at a time (durable):         *)
(*   "associated"  the open branch (the session's transaction log)         *)
(*   "prepared"    transaction/prepared/xa-...; every file parked (a       *)
(*                 dot-name no sweep lists): waits for the decision        *)
(*   "committing"  transaction/xa-committing/: SEND / ACK being applied    *)
(*   "rollingback" transaction/xa-rolling-back/ (or rolling-back/ for a    *)
(*                 branch never prepared): DISCARD / REDELIVER applied     *)
(*   "committed", "rolledback"  the log is deleted: the branch is over     *)
(* Each move of a decided branch is applied one at a time, so a crash can  *)
(* stop the application half-way; whoever finds the log finishes it (the  *)
(* moves are idempotent renames).                                          *)
(*                                                                         *)
(* The database branch commits or aborts atomically (PostgreSQL PREPARE    *)
(* TRANSACTION / COMMIT PREPARED); an unprepared one dies with its         *)
(* connection.                                                             *)
(*                                                                         *)
(* The coordinator: prepare both; write the decision durably (the         *)
(* decision log, fsynced); commit both; forget.  It may crash at any step *)
(* (at most MaxCrashes times); the restarted coordinator recovers: commit  *)
(* where a decision is logged, roll back prepared branches without one.    *)
(* While the coordinator is down the dead-owner sweeps of the dropbox run  *)
(* (recovery.py): they roll back an open (associated) branch and never see *)
(* a prepared one.                                                         *)
(*                                                                         *)
(* MUTANT = TRUE: phase two starts before the decision is durable (it is  *)
(* written only once phase two is over).  TLC must reject it: a crash     *)
(* after the first commit leaves no decision, recovery rolls the other     *)
(* branch back, and the transaction is half-applied.                       *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    Moves,        \* the file moves of the dropbox branch (model values)
    MaxCrashes,   \* crashes of the coordinator process, in all
    MUTANT        \* TRUE: commit applied before the decision is durable

VARIABLES
    pc,           \* coordinator: "work" "prep" "phase2" "abort" "recover" "end"
    up,           \* is the coordinator process alive?
    decision,     \* durable decision log: "none" | "commit"
    mqLog,        \* where the dropbox branch's log is (see above)
    applied,      \* moves applied forward (SEND / ACK)
    undone,       \* moves applied backward (DISCARD / REDELIVER)
    db,           \* "active" "prepared" "committed" "aborted"
    crashes

vars == <<pc, up, decision, mqLog, applied, undone, db, crashes>>

MQStates == {"associated", "prepared", "committing", "rollingback", "committed", "rolledback"}
MQCommitted == mqLog \in {"committing", "committed"}
MQAborted == mqLog \in {"rollingback", "rolledback"}
MQOver == mqLog \in {"committed", "rolledback"}
DBOver == db \in {"committed", "aborted"}

TypeOK ==
    /\ pc \in {"work", "prep", "phase2", "abort", "recover", "end"}
    /\ up \in BOOLEAN
    /\ decision \in {"none", "commit"}
    /\ mqLog \in MQStates
    /\ applied \subseteq Moves /\ undone \subseteq Moves
    /\ db \in {"active", "prepared", "committed", "aborted"}
    /\ crashes \in 0..MaxCrashes

Init ==
    /\ pc = "work" /\ up = TRUE /\ decision = "none"
    /\ mqLog = "associated" /\ applied = {} /\ undone = {}
    /\ db = "active" /\ crashes = 0

(* ------------------------------------------------------------ coordinator *)
StartPrepare == up /\ pc = "work" /\ pc' = "prep"
                /\ UNCHANGED <<up, decision, mqLog, applied, undone, db, crashes>>

(* tpc_prepare of the dropbox branch: log + parked files fsynced, log renamed into prepared/ *)
PrepareMQ == up /\ pc = "prep" /\ mqLog = "associated" /\ mqLog' = "prepared"
             /\ UNCHANGED <<pc, up, decision, applied, undone, db, crashes>>

PrepareDB == up /\ pc = "prep" /\ db = "active" /\ db' = "prepared"
             /\ UNCHANGED <<pc, up, decision, mqLog, applied, undone, crashes>>

(* The point of no return: the decision file is written and fsynced (not in the mutant). *)
Decide == up /\ pc = "prep" /\ mqLog = "prepared" /\ db = "prepared"
          /\ decision' = (IF MUTANT THEN decision ELSE "commit")
          /\ pc' = "phase2"
          /\ UNCHANGED <<up, mqLog, applied, undone, db, crashes>>

(* The application decides to roll back (or a prepare failed) before any decision. *)
Abort == up /\ pc \in {"work", "prep"} /\ pc' = "abort"
         /\ UNCHANGED <<up, decision, mqLog, applied, undone, db, crashes>>

(* tpc_commit of the dropbox branch: prepared/ -> xa-committing/ (fsynced) *)
CommitMQ == up /\ pc \in {"phase2", "recover"} /\ mqLog = "prepared"
            /\ (pc = "recover" => decision = "commit")
            /\ mqLog' = "committing"
            /\ UNCHANGED <<pc, up, decision, applied, undone, db, crashes>>

CommitDB == up /\ pc \in {"phase2", "recover"} /\ db = "prepared"
            /\ (pc = "recover" => decision = "commit")
            /\ db' = "committed"
            /\ UNCHANGED <<pc, up, decision, mqLog, applied, undone, crashes>>

(* tpc_rollback: a prepared branch with no decision, or the application's rollback *)
RollbackMQ == up /\ (pc = "abort" \/ (pc = "recover" /\ decision = "none"))
              /\ mqLog \in {"associated", "prepared"} /\ mqLog' = "rollingback"
              /\ UNCHANGED <<pc, up, decision, applied, undone, db, crashes>>

RollbackDB == up /\ (pc = "abort" \/ (pc = "recover" /\ decision = "none"))
              /\ db \in {"active", "prepared"} /\ db' = "aborted"
              /\ UNCHANGED <<pc, up, decision, mqLog, applied, undone, crashes>>

(* Phase two over: forget the decision (the mutant writes it only now). *)
Forget == up /\ pc \in {"phase2", "recover"} /\ MQOver /\ DBOver
          /\ decision' = "none" /\ pc' = "end"
          /\ UNCHANGED <<up, mqLog, applied, undone, db, crashes>>

FinishAbort == up /\ pc = "abort" /\ MQOver /\ DBOver /\ pc' = "end"
               /\ UNCHANGED <<up, decision, mqLog, applied, undone, db, crashes>>

(* kill -9 of the coordinator (and of the worker holding the dropbox session and
   the database connection): an unprepared database branch dies with it. *)
Crash == up /\ pc /= "end" /\ crashes < MaxCrashes
         /\ up' = FALSE /\ crashes' = crashes + 1
         /\ db' = (IF db = "active" THEN "aborted" ELSE db)
         /\ UNCHANGED <<pc, decision, mqLog, applied, undone>>

Restart == ~up /\ up' = TRUE /\ pc' = "recover"
           /\ UNCHANGED <<decision, mqLog, applied, undone, db, crashes>>

(* ------------------------------------------------------------ the dropbox *)
(* Anyone who finds a decided log applies its moves, one rename at a time. *)
ApplyCommit(m) == mqLog = "committing" /\ m \notin applied /\ applied' = applied \cup {m}
                  /\ UNCHANGED <<pc, up, decision, mqLog, undone, db, crashes>>
ApplyRollback(m) == mqLog = "rollingback" /\ m \notin undone /\ undone' = undone \cup {m}
                    /\ UNCHANGED <<pc, up, decision, mqLog, applied, db, crashes>>
EndCommit == mqLog = "committing" /\ applied = Moves /\ mqLog' = "committed"
             /\ UNCHANGED <<pc, up, decision, applied, undone, db, crashes>>
EndRollback == mqLog = "rollingback" /\ undone = Moves /\ mqLog' = "rolledback"
               /\ UNCHANGED <<pc, up, decision, applied, undone, db, crashes>>

(* Dead-owner recovery (recovery.py / reclaim_dead_owners): rolls back an open
   branch of a dead owner; a prepared branch's files are parked, so it never
   sees one. *)
SweepDeadOwner == ~up /\ mqLog = "associated" /\ mqLog' = "rollingback"
                  /\ UNCHANGED <<pc, up, decision, applied, undone, db, crashes>>

Progress ==
    \/ StartPrepare \/ PrepareMQ \/ PrepareDB \/ Decide
    \/ CommitMQ \/ CommitDB \/ RollbackMQ \/ RollbackDB \/ Forget \/ FinishAbort
    \/ Restart \/ SweepDeadOwner \/ EndCommit \/ EndRollback
    \/ \E m \in Moves : ApplyCommit(m) \/ ApplyRollback(m)

(* Over: nothing left to do (a stuttering step, so TLC sees no deadlock). *)
Done == pc = "end" /\ MQOver /\ DBOver /\ UNCHANGED vars

Next == Progress \/ Abort \/ Crash \/ Done

Spec == Init /\ [][Next]_vars /\ WF_vars(Progress)

(* ------------------------------------------------------------ properties *)
(* A prepared (or open) branch has applied nothing, in either direction. *)
PreparedUntouched == mqLog \in {"associated", "prepared"} => applied = {} /\ undone = {}

(* A branch is applied in one direction only, and a finished one completely. *)
BranchWhole ==
    /\ applied = {} \/ undone = {}
    /\ mqLog = "committed" => applied = Moves
    /\ mqLog = "rolledback" => undone = Moves

(* The two branches never go different ways. *)
Atomic == /\ ~(MQCommitted /\ db = "aborted")
          /\ ~(MQAborted /\ db = "committed")

(* The invariant of the issue: a prepared branch is never half-applied. *)
NeverHalfApplied == PreparedUntouched /\ BranchWhole /\ Atomic

(* Nothing commits without a durable decision (while the decision is remembered). *)
CommitNeedsDecision == (MQCommitted \/ db = "committed") /\ pc /= "end" => decision = "commit"

(* Every transaction ends, both branches over, the same way. *)
Terminates == <>[](pc = "end" /\ MQOver /\ DBOver)
=============================================================================
