------------------------------ MODULE Channel ------------------------------
(***************************************************************************)
(* The abstract message channel of JBoss Messaging Core (seed 002), as a   *)
(* JMS queue sees it.  This is the "what", in the role Lamport's TCommit   *)
(* plays for TwoPhase: Dropbox.tla (the "how": directories, renames,       *)
(* stale listings, crashes, the transaction log) implements it, and TLC    *)
(* checks that as the property Dropbox!Refinement.                         *)
(*                                                                         *)
(* A message is in exactly one state:                                      *)
(*   ABSENT         not in the channel (never created, or discarded/purged)*)
(*   NOT_COMMITTED  accepted in an open transaction (or being written)     *)
(*   NEW            committed; deliverable to any receiver                 *)
(*   DELIVERED      delivered to exactly one receiver, not yet acked       *)
(*   ACKNOWLEDGED   consumed and acknowledged           (terminal)         *)
(*   EXPIRED        its expiration passed before delivery (terminal)       *)
(*   DEAD_LETTER    poison, torn, or redelivered too often (terminal)      *)
(* The names and the moves are those of reference/dropboxmq/lifecycle.py,  *)
(* one to one.  Transacted sends make a whole set NEW in one step, and a   *)
(* transacted receive acknowledges a whole set in one step.                *)
(*                                                                         *)
(* The receive side: each receiver is a session, live or dead.  A message  *)
(* DELIVERED to it leaves that state only by what the session decides     *)
(* (Decide) about everything delivered to it: acknowledge it ("ack": the   *)
(* CLIENT acknowledge(), an AUTO listener that returned -- one message at  *)
(* a time), commit it ("commit": all of it acknowledged in ONE step), or   *)
(* put it back ("back": recover(), rollback(), a listener that threw).     *)
(* Only a dead receiver's messages are put back without a decision.        *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    Msg,          \* the messages (model values)
    Consumer,     \* the receivers competing for them
    Txs,          \* the producer's transactions: disjoint sets of messages
    MaxDel,       \* delivery-count limit: past it a message is dead-lettered
    NoOne         \* "no receiver" (a model value not in Consumer)

Phases == {"run", "ack", "commit", "back"}

States   == {"ABSENT", "NOT_COMMITTED", "NEW", "DELIVERED",
             "ACKNOWLEDGED", "EXPIRED", "DEAD_LETTER"}
Terminal == {"ACKNOWLEDGED", "EXPIRED", "DEAD_LETTER"}

(* The units a producer submits: a transaction, or a single message. *)
Batches == Txs \cup {{m} : m \in Msg \ UNION Txs}

VARIABLES
    state,        \* state[m] \in States
    owner,        \* the receiver a DELIVERED message is delivered to
    redelivered,  \* the JMSRedelivered flag the next/current delivery carries
    dcount,       \* JMSXDeliveryCount of the next/current delivery (1 = first)
    created,      \* messages ever created (a message id is used once)
    live,         \* live[c]: receiver c's session runs (FALSE: it died)
    phase,        \* phase[c]: what c's session is doing with pending[c]
    pending       \* pending[c]: the deliveries of c its decision still covers

cvars == <<state, owner, redelivered, dcount, created, live, phase, pending>>
rvars == <<live, phase, pending>>

TypeOK ==
    /\ state \in [Msg -> States]
    /\ owner \in [Msg -> Consumer \cup {NoOne}]
    /\ redelivered \in [Msg -> BOOLEAN]
    /\ dcount \in [Msg -> 1..(MaxDel + 1)]
    /\ created \subseteq Msg
    /\ live \in [Consumer -> BOOLEAN]
    /\ phase \in [Consumer -> Phases]
    /\ pending \in [Consumer -> SUBSET Msg]

Init ==
    /\ state = [m \in Msg |-> "ABSENT"]
    /\ owner = [m \in Msg |-> NoOne]
    /\ redelivered = [m \in Msg |-> FALSE]
    /\ dcount = [m \in Msg |-> 1]
    /\ created = {}
    /\ live = [c \in Consumer |-> TRUE]
    /\ phase = [c \in Consumer |-> "run"]
    /\ pending = [c \in Consumer |-> {}]

(* The messages delivered to receiver c and not yet acked or put back.   *)
DeliveredTo(c) == {m \in Msg : state[m] = "DELIVERED" /\ owner[m] = c}

(* c's decision now covers S: phase p while S is not empty, "run" after. *)
SetPending(c, p, S) ==
    /\ pending' = [pending EXCEPT ![c] = S]
    /\ phase' = [phase EXCEPT ![c] = IF S = {} THEN "run" ELSE p]

(* m leaves every decision (it was expired or dead-lettered meanwhile).  *)
Forget(m) ==
    /\ pending' = [c \in Consumer |-> pending[c] \ {m}]
    /\ phase' = [c \in Consumer |-> IF pending'[c] = {} THEN "run" ELSE phase[c]]

(* Create: a producer accepts message m into the channel, uncommitted.   *)
Create(m) ==
    /\ m \notin created
    /\ state' = [state EXCEPT ![m] = "NOT_COMMITTED"]
    /\ created' = created \cup {m}
    /\ UNCHANGED <<owner, redelivered, dcount, rvars>>

(* Send: a batch (a transaction, or one message) becomes NEW at once:    *)
(* the commit of seed 002 §5.1.3.                                       *)
Send(S) ==
    /\ S \in Batches
    /\ \A m \in S : state[m] = "NOT_COMMITTED"
    /\ state' = [m \in Msg |-> IF m \in S THEN "NEW" ELSE state[m]]
    /\ UNCHANGED <<owner, redelivered, dcount, created, rvars>>

(* Discard: an uncommitted message is dropped (rollback, orphan sweep).  *)
Discard(m) ==
    /\ state[m] = "NOT_COMMITTED"
    /\ state' = [state EXCEPT ![m] = "ABSENT"]
    /\ UNCHANGED <<owner, redelivered, dcount, created, rvars>>

(* Quarantine: an uncommitted (possibly torn) message is kept aside.     *)
Quarantine(m) ==
    /\ state[m] = "NOT_COMMITTED"
    /\ state' = [state EXCEPT ![m] = "DEAD_LETTER"]
    /\ UNCHANGED <<owner, redelivered, dcount, created, rvars>>

(* Claim: receiver c takes a NEW message; nobody else can have it.       *)
Claim(c, m) ==
    /\ live[c] /\ state[m] = "NEW"
    /\ state' = [state EXCEPT ![m] = "DELIVERED"]
    /\ owner' = [owner EXCEPT ![m] = c]
    /\ UNCHANGED <<redelivered, dcount, created, rvars>>

(* Expire: a NEW message, or one just claimed, whose time has passed.    *)
Expire(m) ==
    /\ state[m] \in {"NEW", "DELIVERED"}
    /\ state' = [state EXCEPT ![m] = "EXPIRED"]
    /\ owner' = [owner EXCEPT ![m] = NoOne]
    /\ Forget(m)
    /\ UNCHANGED <<redelivered, dcount, created, live>>

(* Decide: live receiver c decides about everything delivered to it:    *)
(* acknowledge it ("ack"), commit it ("commit") or put it back ("back"). *)
Decide(c, p) ==
    /\ live[c] /\ phase[c] = "run" /\ p \in Phases \ {"run"}
    /\ DeliveredTo(c) # {}
    /\ SetPending(c, p, DeliveredTo(c))
    /\ UNCHANGED <<state, owner, redelivered, dcount, created, live>>

(* Abort: a commit fails before it acknowledged anything: put it back.   *)
Abort(c) ==
    /\ live[c] /\ phase[c] = "commit"
    /\ phase' = [phase EXCEPT ![c] = "back"]
    /\ UNCHANGED <<state, owner, redelivered, dcount, created, live, pending>>

(* Ack: receiver c acknowledges a set of its deliveries its decision     *)
(* covers: acknowledge() and an AUTO ack any part of it at a time; a     *)
(* commit all of it in one step.                                         *)
Ack(c, S) ==
    /\ live[c] /\ S # {} /\ S \subseteq pending[c]
    /\ \/ phase[c] = "ack"
       \/ phase[c] = "commit" /\ S = pending[c]
    /\ \A m \in S : state[m] = "DELIVERED" /\ owner[m] = c
    /\ state' = [m \in Msg |-> IF m \in S THEN "ACKNOWLEDGED" ELSE state[m]]
    /\ owner' = [m \in Msg |-> IF m \in S THEN NoOne ELSE owner[m]]
    /\ SetPending(c, phase[c], pending[c] \ S)
    /\ UNCHANGED <<redelivered, dcount, created, live>>

(* Redeliver: recover, rollback or listener failure (the owner decided   *)
(* "back"), or a dead owner: the message is put back, flagged            *)
(* redelivered, its count one higher.                                    *)
Redeliver(m) ==
    /\ state[m] = "DELIVERED"
    /\ dcount[m] <= MaxDel
    /\ LET c == owner[m] IN
         /\ c \in Consumer   \* (OneOwner; stated so that the action is total)
         /\ \/ ~live[c] /\ UNCHANGED <<phase, pending>>
            \/ live[c] /\ phase[c] = "back" /\ m \in pending[c]
               /\ SetPending(c, "back", pending[c] \ {m})
    /\ state' = [state EXCEPT ![m] = "NEW"]
    /\ owner' = [owner EXCEPT ![m] = NoOne]
    /\ redelivered' = [redelivered EXCEPT ![m] = TRUE]
    /\ dcount' = [dcount EXCEPT ![m] = @ + 1]
    /\ UNCHANGED <<created, live>>

(* Die: receiver c's process dies; its session and decision are gone,   *)
(* its deliveries stay DELIVERED to it until they are put back.          *)
Die(c) ==
    /\ live[c]
    /\ live' = [live EXCEPT ![c] = FALSE]
    /\ SetPending(c, "run", {})
    /\ UNCHANGED <<state, owner, redelivered, dcount, created>>

(* Revive: a dead receiver with nothing delivered to it starts again.    *)
Revive(c) ==
    /\ ~live[c] /\ DeliveredTo(c) = {}
    /\ live' = [live EXCEPT ![c] = TRUE]
    /\ UNCHANGED <<state, owner, redelivered, dcount, created, phase, pending>>

(* DeadLetter: a delivered message that cannot or must not be delivered *)
(* again (undecodable, or its delivery count is over the limit).        *)
DeadLetter(m) ==
    /\ state[m] = "DELIVERED"
    /\ state' = [state EXCEPT ![m] = "DEAD_LETTER"]
    /\ owner' = [owner EXCEPT ![m] = NoOne]
    /\ Forget(m)
    /\ UNCHANGED <<redelivered, dcount, created, live>>

(* Purge: the operator removes a NEW message, or housekeeping removes a *)
(* terminal one.                                                        *)
Purge(m) ==
    /\ state[m] \in {"NEW"} \cup Terminal
    /\ state' = [state EXCEPT ![m] = "ABSENT"]
    /\ redelivered' = [redelivered EXCEPT ![m] = FALSE]
    /\ dcount' = [dcount EXCEPT ![m] = 1]
    /\ UNCHANGED <<owner, created, rvars>>

Next ==
    \/ \E m \in Msg : Create(m) \/ Discard(m) \/ Quarantine(m) \/ Expire(m)
                      \/ Redeliver(m) \/ DeadLetter(m) \/ Purge(m)
    \/ \E S \in Batches : Send(S)
    \/ \E c \in Consumer, m \in Msg : Claim(c, m)
    \/ \E c \in Consumer, S \in SUBSET Msg : Ack(c, S)
    \/ \E c \in Consumer : \/ \E p \in Phases : Decide(c, p)
                            \/ Abort(c) \/ Die(c) \/ Revive(c)

Spec == Init /\ [][Next]_cvars

(***************************************************************************)
(* Properties of the channel itself.                                       *)
(***************************************************************************)
(* A DELIVERED message has exactly one receiver; no other state has one. *)
OneOwner == \A m \in Msg : (owner[m] # NoOne) <=> (state[m] = "DELIVERED")

(* The redelivered flag is the delivery count above one.                 *)
FlagMatchesCount == \A m \in Msg : redelivered[m] <=> (dcount[m] > 1)

(* Transaction atomicity: no message of a transaction is committed       *)
(* (NEW, or consumed after being NEW) while another one of it is still   *)
(* uncommitted.  (DEAD_LETTER is left out: Quarantine reaches it from    *)
(* NOT_COMMITTED.)                                                       *)
TxAtomic ==
    \A T \in Txs :
        ~ /\ \E m \in T : state[m] = "NOT_COMMITTED"
          /\ \E m \in T : state[m] \in {"NEW", "DELIVERED", "ACKNOWLEDGED", "EXPIRED"}

(* A decision covers only what is delivered to a live receiver, and a    *)
(* receiver is in a phase exactly while its decision covers something.   *)
PendingDelivered ==
    \A c \in Consumer :
        /\ pending[c] \subseteq DeliveredTo(c)
        /\ (phase[c] = "run") <=> (pending[c] = {})
        /\ ~live[c] => pending[c] = {}

(***************************************************************************)
(* The receive-side rules as action properties.  Spec implies each (they   *)
(* restate guards of Ack and Redeliver); Dropbox checks them under its     *)
(* refinement mapping so that a step that breaks one is reported by name.  *)
(***************************************************************************)
AckedNow(m)   == state[m] = "DELIVERED" /\ state'[m] = "ACKNOWLEDGED"
PutBackNow(m) == state[m] = "DELIVERED" /\ state'[m] = "NEW"

(* Only a live receiver's acknowledge/commit/returned listener acks.     *)
AckJustified ==
    \A m \in Msg : AckedNow(m) =>
        /\ owner[m] \in Consumer /\ live[owner[m]]
        /\ phase[owner[m]] \in {"ack", "commit"} /\ m \in pending[owner[m]]

(* Only recover/rollback/a failed listener or the owner's death puts a   *)
(* delivered message back.                                               *)
RedeliveryJustified ==
    \A m \in Msg : PutBackNow(m) =>
        \/ owner[m] \in Consumer /\ ~live[owner[m]]
        \/ owner[m] \in Consumer /\ phase[owner[m]] = "back" /\ m \in pending[owner[m]]

(* A commit acknowledges all its receives in one step, or none.          *)
ReceiveTxAllOrNothing ==
    \A c \in Consumer : phase[c] = "commit" =>
        LET A == {m \in pending[c] : AckedNow(m)} IN A = {} \/ A = pending[c]

AckRules == [][AckJustified /\ RedeliveryJustified /\ ReceiveTxAllOrNothing]_cvars

Symmetry == Permutations(Consumer)

THEOREM Spec => [](TypeOK /\ OneOwner /\ FlagMatchesCount /\ PendingDelivered)
(* TLC figures (models/channel.cfg: 2 messages in one transaction, 2     *)
(* receivers, MaxDel 2, symmetry, 1 worker, shared 2-core machine):       *)
(*   277 distinct states, 2.1 s; TypeOK OneOwner FlagMatchesCount        *)
(*   TxAtomic hold.  Channel is also checked as Dropbox!Refinement in    *)
(*   every Dropbox model (figures at the bottom of Dropbox.tla).          *)
=============================================================================
