-------------------------- MODULE CheckpointOwner --------------------------
(***************************************************************************)
(* A consumer whose acknowledgement is decided by an external commit log: *)
(* a Spark streaming query (reference/dropboxmq_spark/__init__.py), like a          *)
(* transacted consumer whose commit record lives outside the dropbox.      *)
(*                                                                         *)
(* The query claims a batch (processing/<query>~...), its checkpoint logs *)
(* the batch (offsets/), the sink commits it (once per batch id, however  *)
(* often the batch is replayed), the checkpoint records that (commits/),  *)
(* and only then are the claims acknowledged.  The query's process may    *)
(* die at any step and be restarted from its checkpoint any number of     *)
(* times; a restarted query replays a logged batch the sink has not       *)
(* committed.  A plain consumer competes on the same queue, and any        *)
(* recoverer (dropboxmq recover, every consumer's periodic reclaim)        *)
(* returns the claims of a dead owner.                                     *)
(*                                                                         *)
(* The rule: the claims belong to the checkpoint, not to the process.  An *)
(* owner is dead only when its process is down AND its checkpoint is gone *)
(* (deleted, or released by the operator).  MUTANT: dead when the process *)
(* is down (a process-owned claim) -- a recoverer returns a batch the     *)
(* restarted query then commits: a message delivered twice.               *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS Msgs, MUTANT

VARIABLES
    box,        \* m -> "target" | "query" (claimed by the query) | "acked"
    batch,      \* the query's logged batch not yet acknowledged ({} when none)
    sinkHas,    \* the sink has committed that batch
    logged,     \* the checkpoint's commits/ records it
    up,         \* the query's process is running
    ckpt,       \* its checkpoint exists (FALSE: deleted or released: gone for good)
    sink,       \* m -> how many times the sink committed m
    rival,      \* m -> how many times the plain consumer consumed m
    redel       \* the messages a recoverer returned (they come back marked redelivered)

vars == <<box, batch, sinkHas, logged, up, ckpt, sink, rival, redel>>

TypeOK ==
    /\ box \in [Msgs -> {"target", "query", "acked"}]
    /\ batch \subseteq Msgs
    /\ sinkHas \in BOOLEAN /\ logged \in BOOLEAN /\ up \in BOOLEAN /\ ckpt \in BOOLEAN
    /\ sink \in [Msgs -> Nat] /\ rival \in [Msgs -> Nat] /\ redel \subseteq Msgs

Init ==
    /\ box = [m \in Msgs |-> "target"]
    /\ batch = {} /\ sinkHas = FALSE /\ logged = FALSE
    /\ up = TRUE /\ ckpt = TRUE
    /\ sink = [m \in Msgs |-> 0] /\ rival = [m \in Msgs |-> 0] /\ redel = {}

\* latestOffset claims a batch and Spark logs it in offsets/ (a claim no logged
\* batch names is returned at the next start: dropboxmq_spark _return_unplanned)
Claim ==
    /\ up /\ batch = {}
    /\ \E S \in SUBSET {m \in Msgs : box[m] = "target"} :
        /\ S # {}
        /\ box' = [m \in Msgs |-> IF m \in S THEN "query" ELSE box[m]]
        /\ batch' = S
    /\ sinkHas' = FALSE /\ logged' = FALSE
    /\ UNCHANGED <<up, ckpt, sink, rival, redel>>

\* the sink commits the batch, at most once per batch id (a replay of a
\* committed batch writes nothing); it writes the rows the batch's claims hold
SinkCommit ==
    /\ up /\ batch # {} /\ ~sinkHas
    /\ sink' = [m \in Msgs |-> IF m \in batch /\ box[m] = "query" THEN sink[m] + 1 ELSE sink[m]]
    /\ sinkHas' = TRUE
    /\ UNCHANGED <<box, batch, logged, up, ckpt, rival, redel>>

\* Spark writes commits/<batch>
LogCommit ==
    /\ up /\ sinkHas /\ ~logged
    /\ logged' = TRUE
    /\ UNCHANGED <<box, batch, sinkHas, up, ckpt, sink, rival, redel>>

\* the next trigger (or the next start) acknowledges what commits/ records
Ack ==
    /\ up /\ logged
    /\ box' = [m \in Msgs |-> IF m \in batch /\ box[m] = "query" THEN "acked" ELSE box[m]]
    /\ batch' = {} /\ sinkHas' = FALSE /\ logged' = FALSE
    /\ UNCHANGED <<up, ckpt, sink, rival, redel>>

\* kill -9, or a stop, at any step
Crash ==
    /\ up
    /\ up' = FALSE
    /\ UNCHANGED <<box, batch, sinkHas, logged, ckpt, sink, rival, redel>>

Restart ==
    /\ ~up /\ ckpt
    /\ up' = TRUE
    /\ UNCHANGED <<box, batch, sinkHas, logged, ckpt, sink, rival, redel>>

\* the checkpoint deleted, or dropboxmq recover --release: the query is gone for good
Abandon ==
    /\ ~up /\ ckpt
    /\ ckpt' = FALSE
    /\ UNCHANGED <<box, batch, sinkHas, logged, up, sink, rival, redel>>

OwnerDead == IF MUTANT THEN ~up ELSE ~up /\ ~ckpt

\* recover / a consumer's reclaim: REDELIVER a dead owner's claims
Reclaim ==
    /\ OwnerDead
    /\ \E m \in Msgs :
        /\ box[m] = "query"
        /\ box' = [box EXCEPT ![m] = "target"]
        /\ redel' = redel \cup {m}
    /\ UNCHANGED <<batch, sinkHas, logged, up, ckpt, sink, rival>>

\* the plain consumer: claim, process, acknowledge
RivalConsume ==
    /\ \E m \in Msgs :
        /\ box[m] = "target"
        /\ box' = [box EXCEPT ![m] = "acked"]
        /\ rival' = [rival EXCEPT ![m] = rival[m] + 1]
    /\ UNCHANGED <<batch, sinkHas, logged, up, ckpt, sink, redel>>

Next == Claim \/ SinkCommit \/ LogCommit \/ Ack \/ Crash \/ Restart \/ Abandon \/ Reclaim \/ RivalConsume

Spec == Init /\ [][Next]_vars

(* Every message is processed once, by the sink or the plain consumer; a     *)
(* second time only after its query was abandoned (checkpoint gone), and   *)
(* then marked redelivered, as any dead owner's message.                   *)
ExactlyOnce == \A m \in Msgs : sink[m] + rival[m] > 1 => ~ckpt /\ m \in redel

(* An acknowledged message was processed (nothing is acknowledged unseen). *)
AckedWasProcessed == \A m \in Msgs : box[m] = "acked" => sink[m] + rival[m] >= 1

(* A claim is either in the query's current batch or (gone for good) about to return. *)
ClaimsInBatch == \A m \in Msgs : box[m] = "query" => m \in batch
=============================================================================
