------------------------------ MODULE Topics -------------------------------
(***************************************************************************)
(* Topics (PROTOCOL.md §1, seeds 001 and 004): a publisher fans a copy of  *)
(* each message out to every subscription that exists when it publishes;   *)
(* every subscription is its own dropbox (working/target/processing/...)   *)
(* whose copies then live the queue life of Dropbox.tla.  Abstracted here  *)
(* to the Channel states of each copy (m, s).                              *)
(*                                                                         *)
(*   "durable"    a durable subscription: exists from the start and keeps  *)
(*                its messages while no consumer is attached;              *)
(*   "shared"     a shared durable subscription: its consumers compete on  *)
(*                its target/ (rename claim) -- each copy to one consumer; *)
(*   "nondurable" a non-durable subscription: exists while its consumer is *)
(*                attached; removed (with its files) when it closes.       *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS Msg, DurableCons, SharedCons, NonDurableCons, NoOne

Subs == {"durable", "shared", "nondurable"}
Consumers == {DurableCons} \cup SharedCons \cup {NonDurableCons}
SubOf(c) == IF c = DurableCons THEN "durable"
            ELSE IF c \in SharedCons THEN "shared" ELSE "nondurable"
CopyStates == {"ABSENT", "NEW", "DELIVERED", "ACKNOWLEDGED"}

VARIABLES st, owner, attached, exists, published
vars == <<st, owner, attached, exists, published>>

TypeOK ==
    /\ st \in [Msg -> [Subs -> CopyStates]]
    /\ owner \in [Msg -> [Subs -> Consumers \cup {NoOne}]]
    /\ attached \in [Consumers -> BOOLEAN]
    /\ exists \in [Subs -> BOOLEAN]
    /\ published \subseteq Msg

Init ==
    /\ st = [m \in Msg |-> [s \in Subs |-> "ABSENT"]]
    /\ owner = [m \in Msg |-> [s \in Subs |-> NoOne]]
    /\ attached = [c \in Consumers |-> FALSE]
    /\ exists = [s \in Subs |-> s # "nondurable"]
    /\ published = {}

(* Publish: write the message into working/ of every existing           *)
(* subscription (and of its ancestors' -- one topic here) and rename     *)
(* each copy into target/.  A transacted publish would make all copies   *)
(* NEW at its point of no return; the copies appear together.            *)
Publish(m) ==
    /\ m \notin published
    /\ published' = published \cup {m}
    /\ st' = [st EXCEPT ![m] = [s \in Subs |-> IF exists[s] THEN "NEW" ELSE "ABSENT"]]
    /\ UNCHANGED <<owner, attached, exists>>

(* Attach: a consumer opens on its subscription; a non-durable          *)
(* subscription directory is created now (it sees later messages only). *)
Attach(c) ==
    /\ ~attached[c]
    /\ attached' = [attached EXCEPT ![c] = TRUE]
    /\ exists' = [exists EXCEPT ![SubOf(c)] = TRUE]
    /\ UNCHANGED <<st, owner, published>>

(* Claim: rename .subscriptions/<subId>/target -> processing; for the   *)
(* shared subscription the consumers race and exactly one wins.          *)
Claim(c, m) ==
    /\ attached[c] /\ st[m][SubOf(c)] = "NEW"
    /\ st' = [st EXCEPT ![m][SubOf(c)] = "DELIVERED"]
    /\ owner' = [owner EXCEPT ![m][SubOf(c)] = c]
    /\ UNCHANGED <<attached, exists, published>>

(* Ack: rename processing -> processed.                                   *)
Ack(c, m) ==
    /\ attached[c] /\ st[m][SubOf(c)] = "DELIVERED" /\ owner[m][SubOf(c)] = c
    /\ st' = [st EXCEPT ![m][SubOf(c)] = "ACKNOWLEDGED"]
    /\ owner' = [owner EXCEPT ![m][SubOf(c)] = NoOne]
    /\ UNCHANGED <<attached, exists, published>>

(* Detach: the consumer closes (or dies and is recovered): its unacked   *)
(* copies go back to target/ redelivered; the non-durable subscription   *)
(* is removed with all its files.                                        *)
Detach(c) ==
    LET s == SubOf(c) IN
    /\ attached[c]
    /\ attached' = [attached EXCEPT ![c] = FALSE]
    /\ IF s = "nondurable"
       THEN /\ exists' = [exists EXCEPT ![s] = FALSE]
            /\ st' = [m \in Msg |-> [st[m] EXCEPT ![s] = "ABSENT"]]
            /\ owner' = [m \in Msg |-> [owner[m] EXCEPT ![s] = NoOne]]
       ELSE /\ st' = [m \in Msg |-> [st[m] EXCEPT ![s] =
                        IF owner[m][s] = c THEN "NEW" ELSE @]]
            /\ owner' = [m \in Msg |-> [owner[m] EXCEPT ![s] =
                        IF @ = c THEN NoOne ELSE @]]
            /\ UNCHANGED exists
    /\ UNCHANGED published

Next ==
    \/ \E m \in Msg : Publish(m)
    \/ \E c \in Consumers : Attach(c) \/ Detach(c)
    \/ \E c \in Consumers, m \in Msg : Claim(c, m) \/ Ack(c, m)

Spec == Init /\ [][Next]_vars
FairSpec ==
    /\ Spec
    /\ \A c \in Consumers, m \in Msg : SF_vars(Claim(c, m)) /\ SF_vars(Ack(c, m))
    /\ \A c \in Consumers : WF_vars(Attach(c))

(* A durable subscription has a copy of every published message, kept   *)
(* (NEW, DELIVERED or ACKNOWLEDGED) whether or not a consumer is on it.  *)
DurableKeeps ==
    \A m \in published : \A s \in {"durable", "shared"} : st[m][s] # "ABSENT"

(* A copy is delivered to at most one consumer, one of its subscription.*)
OneConsumerPerCopy ==
    \A m \in Msg, s \in Subs :
        (st[m][s] = "DELIVERED") <=> (owner[m][s] # NoOne /\ SubOf(owner[m][s]) = s)

(* Nothing is delivered to a detached consumer.                          *)
OnlyAttachedHold ==
    \A m \in Msg, s \in Subs : owner[m][s] # NoOne => attached[owner[m][s]]

(* Liveness: while consumers keep coming back, every durable copy is     *)
(* eventually acknowledged.                                              *)
DurableEventuallyAcked ==
    \A m \in Msg : \A s \in {"durable", "shared"} :
        (st[m][s] = "NEW") ~> (st[m][s] = "ACKNOWLEDGED")
(* TLC figures (Topics.cfg, FairSpec, 1 worker, shared 2-core machine):   *)
(*   316 distinct states, 4.7 s; all invariants and DurableEventuallyAcked *)
(*   hold.                                                                 *)
=============================================================================
