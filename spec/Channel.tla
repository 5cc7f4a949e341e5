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
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    Msg,          \* the messages (model values)
    Consumer,     \* the receivers competing for them
    Txs,          \* the producer's transactions: disjoint sets of messages
    MaxDel,       \* delivery-count limit: past it a message is dead-lettered
    NoOne         \* "no receiver" (a model value not in Consumer)

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
    created       \* messages ever created (a message id is used once)

cvars == <<state, owner, redelivered, dcount, created>>

TypeOK ==
    /\ state \in [Msg -> States]
    /\ owner \in [Msg -> Consumer \cup {NoOne}]
    /\ redelivered \in [Msg -> BOOLEAN]
    /\ dcount \in [Msg -> 1..(MaxDel + 1)]
    /\ created \subseteq Msg

Init ==
    /\ state = [m \in Msg |-> "ABSENT"]
    /\ owner = [m \in Msg |-> NoOne]
    /\ redelivered = [m \in Msg |-> FALSE]
    /\ dcount = [m \in Msg |-> 1]
    /\ created = {}

(* Create: a producer accepts message m into the channel, uncommitted.   *)
Create(m) ==
    /\ m \notin created
    /\ state' = [state EXCEPT ![m] = "NOT_COMMITTED"]
    /\ created' = created \cup {m}
    /\ UNCHANGED <<owner, redelivered, dcount>>

(* Send: a batch (a transaction, or one message) becomes NEW at once:    *)
(* the commit of seed 002 §5.1.3.                                       *)
Send(S) ==
    /\ S \in Batches
    /\ \A m \in S : state[m] = "NOT_COMMITTED"
    /\ state' = [m \in Msg |-> IF m \in S THEN "NEW" ELSE state[m]]
    /\ UNCHANGED <<owner, redelivered, dcount, created>>

(* Discard: an uncommitted message is dropped (rollback, orphan sweep).  *)
Discard(m) ==
    /\ state[m] = "NOT_COMMITTED"
    /\ state' = [state EXCEPT ![m] = "ABSENT"]
    /\ UNCHANGED <<owner, redelivered, dcount, created>>

(* Quarantine: an uncommitted (possibly torn) message is kept aside.     *)
Quarantine(m) ==
    /\ state[m] = "NOT_COMMITTED"
    /\ state' = [state EXCEPT ![m] = "DEAD_LETTER"]
    /\ UNCHANGED <<owner, redelivered, dcount, created>>

(* Claim: receiver c takes a NEW message; nobody else can have it.       *)
Claim(c, m) ==
    /\ state[m] = "NEW"
    /\ state' = [state EXCEPT ![m] = "DELIVERED"]
    /\ owner' = [owner EXCEPT ![m] = c]
    /\ UNCHANGED <<redelivered, dcount, created>>

(* Expire: a NEW message, or one just claimed, whose time has passed.    *)
Expire(m) ==
    /\ state[m] \in {"NEW", "DELIVERED"}
    /\ state' = [state EXCEPT ![m] = "EXPIRED"]
    /\ owner' = [owner EXCEPT ![m] = NoOne]
    /\ UNCHANGED <<redelivered, dcount, created>>

(* Ack: receiver c acknowledges a set of its deliveries (one message,    *)
(* or all receives of a transaction, at once).                          *)
Ack(c, S) ==
    /\ S # {}
    /\ \A m \in S : state[m] = "DELIVERED" /\ owner[m] = c
    /\ state' = [m \in Msg |-> IF m \in S THEN "ACKNOWLEDGED" ELSE state[m]]
    /\ owner' = [m \in Msg |-> IF m \in S THEN NoOne ELSE owner[m]]
    /\ UNCHANGED <<redelivered, dcount, created>>

(* Redeliver: recover, rollback, listener failure or a dead receiver     *)
(* put the message back, flagged redelivered, its count one higher.     *)
Redeliver(m) ==
    /\ state[m] = "DELIVERED"
    /\ dcount[m] <= MaxDel
    /\ state' = [state EXCEPT ![m] = "NEW"]
    /\ owner' = [owner EXCEPT ![m] = NoOne]
    /\ redelivered' = [redelivered EXCEPT ![m] = TRUE]
    /\ dcount' = [dcount EXCEPT ![m] = @ + 1]
    /\ UNCHANGED created

(* DeadLetter: a delivered message that cannot or must not be delivered *)
(* again (undecodable, or its delivery count is over the limit).        *)
DeadLetter(m) ==
    /\ state[m] = "DELIVERED"
    /\ state' = [state EXCEPT ![m] = "DEAD_LETTER"]
    /\ owner' = [owner EXCEPT ![m] = NoOne]
    /\ UNCHANGED <<redelivered, dcount, created>>

(* Purge: the operator removes a NEW message, or housekeeping removes a *)
(* terminal one.                                                        *)
Purge(m) ==
    /\ state[m] \in {"NEW"} \cup Terminal
    /\ state' = [state EXCEPT ![m] = "ABSENT"]
    /\ redelivered' = [redelivered EXCEPT ![m] = FALSE]
    /\ dcount' = [dcount EXCEPT ![m] = 1]
    /\ UNCHANGED <<owner, created>>

Next ==
    \/ \E m \in Msg : Create(m) \/ Discard(m) \/ Quarantine(m) \/ Expire(m)
                      \/ Redeliver(m) \/ DeadLetter(m) \/ Purge(m)
    \/ \E S \in Batches : Send(S)
    \/ \E c \in Consumer, m \in Msg : Claim(c, m)
    \/ \E c \in Consumer, S \in SUBSET Msg : Ack(c, S)

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

Symmetry == Permutations(Consumer)

THEOREM Spec => [](TypeOK /\ OneOwner /\ FlagMatchesCount)
(* TLC figures (models/channel.cfg: 2 messages in one transaction, 2     *)
(* receivers, MaxDel 2, symmetry, 1 worker, shared 2-core machine):       *)
(*   277 distinct states, 2.1 s; TypeOK OneOwner FlagMatchesCount        *)
(*   TxAtomic hold.  Channel is also checked as Dropbox!Refinement in    *)
(*   every Dropbox model (figures at the bottom of Dropbox.tla).          *)
=============================================================================
