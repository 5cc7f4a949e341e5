-------------------------- MODULE CheckpointOwner --------------------------
(***************************************************************************)
(* A consumer whose acknowledgement is decided by an external commit log: *)
(* a Spark streaming query (reference/dropboxmq_spark/__init__.py), like a *)
(* transacted consumer whose commit record lives outside the dropbox.      *)
(*                                                                         *)
(* The query plans a batch (latestOffset: names of target/, nothing moved) *)
(* and its checkpoint logs it (offsets/); the batch's read tasks claim     *)
(* its names one by one (processing/<query>~...) and read what they hold;  *)
(* the sink commits the batch (once per batch id, however often it is      *)
(* replayed), the checkpoint records that (commits/), and only then are    *)
(* the claims acknowledged.  The query's process may die at any step and   *)
(* be restarted from its checkpoint any number of times; a restarted query *)
(* replays a logged batch the sink has not committed -- READ-ONLY: it      *)
(* reads what the query already holds for that batch and claims nothing,   *)
(* for it cannot know whether the sink already has the batch.  A plain     *)
(* consumer competes on the same queue and may hold a message and give it  *)
(* back (rollback, recover, its own death); any recoverer returns the      *)
(* claims of a dead owner.                                                 *)
(*                                                                         *)
(* The rules: (1) the claims belong to the checkpoint, not to the process: *)
(* an owner is dead only when its process is down AND its checkpoint is    *)
(* gone (deleted, or released by the operator); (2) a task claims only in  *)
(* a batch planned by the running process, before the sink commits it.    *)
(* MUTANTS: "process_owned" (dead when the process is down: a recoverer    *)
(* returns a batch the restarted query then commits: processed twice);     *)
(* "replay_claims" (a replay claims too: a batch whose sink committed      *)
(* before the crash claims a message given back since, and acknowledges    *)
(* it unprocessed); "claim_after_sink" (a task claims after the sink       *)
(* committed: the same loss within one run).                               *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS Msgs, MUTANT  \* MUTANT: "none", "process_owned", "replay_claims", "claim_after_sink"

VARIABLES
    box,        \* m -> "target" | "query" (claimed by the query) | "rival" (held by the plain consumer) | "acked"
    batch,      \* the names of the query's logged batch not yet acknowledged ({} when none)
    mine,       \* that batch was planned by the running process (FALSE: a replay after a restart)
    sinkHas,    \* the sink has committed that batch (its own durable record, kept across restarts)
    wrote,      \* the running process has run that batch's sink step (the tasks are done)
    logged,     \* the checkpoint's commits/ records it
    up,         \* the query's process is running
    ckpt,       \* its checkpoint exists (FALSE: deleted or released: gone for good)
    sink,       \* m -> how many times the sink committed m
    rival,      \* m -> how many times the plain consumer processed m
    redel       \* the messages given back (by a recoverer or the plain consumer): they come back redelivered

vars == <<box, batch, mine, sinkHas, wrote, logged, up, ckpt, sink, rival, redel>>

TypeOK ==
    /\ box \in [Msgs -> {"target", "query", "rival", "acked"}]
    /\ batch \subseteq Msgs
    /\ mine \in BOOLEAN /\ sinkHas \in BOOLEAN /\ wrote \in BOOLEAN /\ logged \in BOOLEAN /\ up \in BOOLEAN /\ ckpt \in BOOLEAN
    /\ sink \in [Msgs -> Nat] /\ rival \in [Msgs -> Nat] /\ redel \subseteq Msgs

Init ==
    /\ box = [m \in Msgs |-> "target"]
    /\ batch = {} /\ mine = FALSE /\ sinkHas = FALSE /\ wrote = FALSE /\ logged = FALSE
    /\ up = TRUE /\ ckpt = TRUE
    /\ sink = [m \in Msgs |-> 0] /\ rival = [m \in Msgs |-> 0] /\ redel = {}

\* latestOffset plans a batch -- names from a listing that may be stale (held or
\* acknowledged since): nothing moves -- and Spark logs it in offsets/
Plan ==
    /\ up /\ batch = {}
    /\ \E S \in SUBSET Msgs :
        /\ S # {}
        /\ batch' = S
    /\ mine' = TRUE /\ sinkHas' = FALSE /\ wrote' = FALSE /\ logged' = FALSE
    /\ UNCHANGED <<box, up, ckpt, sink, rival, redel>>

\* a read task claims one planned name still in target/ (the consumer's claim step);
\* a name gone (held by the rival, acknowledged) is skipped
TaskClaim ==
    /\ up /\ ~logged  \* (Spark never re-runs a batch its commits/ records)
    /\ mine \/ MUTANT = "replay_claims"
    /\ ~wrote \/ MUTANT = "claim_after_sink"
    /\ \E m \in batch :
        /\ box[m] = "target"
        /\ box' = [box EXCEPT ![m] = "query"]
    /\ UNCHANGED <<batch, mine, sinkHas, wrote, logged, up, ckpt, sink, rival, redel>>

\* the batch's sink step, once its tasks are done: the sink commits the batch at most
\* once per batch id (a replay of a committed batch writes nothing); it writes the
\* rows the tasks read: the batch's claims
SinkCommit ==
    /\ up /\ batch # {} /\ ~wrote /\ ~logged
    /\ wrote' = TRUE
    /\ IF sinkHas
       THEN UNCHANGED <<sink, sinkHas>>
       ELSE /\ sink' = [m \in Msgs |-> IF m \in batch /\ box[m] = "query" THEN sink[m] + 1 ELSE sink[m]]
            /\ sinkHas' = TRUE
    /\ UNCHANGED <<box, batch, mine, logged, up, ckpt, rival, redel>>

\* Spark writes commits/<batch>
LogCommit ==
    /\ up /\ wrote /\ ~logged
    /\ logged' = TRUE
    /\ UNCHANGED <<box, batch, mine, sinkHas, wrote, up, ckpt, sink, rival, redel>>

\* the next trigger (or the next start) acknowledges the batch's names claimed by
\* the query; its names never claimed stay in target/ for a later batch
Ack ==
    /\ up /\ logged
    /\ box' = [m \in Msgs |-> IF m \in batch /\ box[m] = "query" THEN "acked" ELSE box[m]]
    /\ batch' = {} /\ sinkHas' = FALSE /\ wrote' = FALSE /\ logged' = FALSE
    /\ UNCHANGED <<mine, up, ckpt, sink, rival, redel>>

\* kill -9, or a stop, at any step
Crash ==
    /\ up
    /\ up' = FALSE
    /\ UNCHANGED <<box, batch, mine, sinkHas, wrote, logged, ckpt, sink, rival, redel>>

\* a restart replays the logged batch (if any): planned by another process
Restart ==
    /\ ~up /\ ckpt
    /\ up' = TRUE /\ mine' = FALSE /\ wrote' = FALSE
    /\ UNCHANGED <<box, batch, sinkHas, logged, ckpt, sink, rival, redel>>

\* the checkpoint deleted, or dropboxmq recover --release: the query is gone for good
Abandon ==
    /\ ~up /\ ckpt
    /\ ckpt' = FALSE
    /\ UNCHANGED <<box, batch, mine, sinkHas, wrote, logged, up, sink, rival, redel>>

OwnerDead == IF MUTANT = "process_owned" THEN ~up ELSE ~up /\ ~ckpt

\* recover / a consumer's reclaim: REDELIVER a dead owner's claims
Reclaim ==
    /\ OwnerDead
    /\ \E m \in Msgs :
        /\ box[m] = "query"
        /\ box' = [box EXCEPT ![m] = "target"]
        /\ redel' = redel \cup {m}
    /\ UNCHANGED <<batch, mine, sinkHas, wrote, logged, up, ckpt, sink, rival>>

\* the plain consumer: claim, then acknowledge once processed, or give back
RivalClaim ==
    /\ \E m \in Msgs :
        /\ box[m] = "target"
        /\ box' = [box EXCEPT ![m] = "rival"]
    /\ UNCHANGED <<batch, mine, sinkHas, wrote, logged, up, ckpt, sink, rival, redel>>

RivalAck ==
    /\ \E m \in Msgs :
        /\ box[m] = "rival"
        /\ box' = [box EXCEPT ![m] = "acked"]
        /\ rival' = [rival EXCEPT ![m] = rival[m] + 1]
    /\ UNCHANGED <<batch, mine, sinkHas, wrote, logged, up, ckpt, sink, redel>>

RivalGiveBack ==
    /\ \E m \in Msgs :
        /\ box[m] = "rival"
        /\ box' = [box EXCEPT ![m] = "target"]
        /\ redel' = redel \cup {m}
    /\ UNCHANGED <<batch, mine, sinkHas, wrote, logged, up, ckpt, sink, rival>>

Next == Plan \/ TaskClaim \/ SinkCommit \/ LogCommit \/ Ack \/ Crash \/ Restart \/ Abandon \/ Reclaim
        \/ RivalClaim \/ RivalAck \/ RivalGiveBack

Spec == Init /\ [][Next]_vars

(* Every message is processed once, by the sink or the plain consumer; a     *)
(* second time only after its query was abandoned (checkpoint gone), and   *)
(* then marked redelivered, as any dead owner's message.                   *)
ExactlyOnce == \A m \in Msgs : sink[m] + rival[m] > 1 => ~ckpt /\ m \in redel

(* An acknowledged message was processed (nothing is acknowledged unseen). *)
AckedWasProcessed == \A m \in Msgs : box[m] = "acked" => sink[m] + rival[m] >= 1

(* A claim of the query is in its current batch (commit finds it there).   *)
ClaimsInBatch == \A m \in Msgs : box[m] = "query" => m \in batch
=============================================================================
