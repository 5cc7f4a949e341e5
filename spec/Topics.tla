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

VARIABLES st, owner, attached, exists, published,
          subsAt,     \* history: subsAt[m], the subscriptions that existed when m was published
          inflight    \* inflight[c]: the copies consumer c's session holds (claimed, not acked)
vars == <<st, owner, attached, exists, published, subsAt, inflight>>

(***************************************************************************)
(* The definitions the mutant configurations (spec/TopicsMutant*.cfg)      *)
(* override, one implementation decision each.                             *)
(***************************************************************************)
FanOut == {s \in Subs : exists[s]}      \* publish copies to every existing subscription
RemovedOnClose(s) == s = "nondurable"    \* closing its consumer removes the subscription
(* mutant: the publisher forgets the shared subscription's copy *)
MutantFanOut == {s \in Subs : exists[s]} \ {"shared"}
(* mutant: a non-durable subscription is left behind when its consumer closes *)
MutantRemovedOnClose(s) == FALSE
(* Closing consumer c returns the copies of its subscription s that c    *)
(* holds: processing/<client>~* of c's own client prefix.               *)
ReturnedOnClose(c, m, s) == owner[m][s] = c
(* mutant: closing one shared consumer returns every copy in processing/ *)
(* (a glob without the client prefix), the other consumer's too          *)
MutantReturnedOnClose(c, m, s) == owner[m][s] # NoOne

TypeOK ==
    /\ st \in [Msg -> [Subs -> CopyStates]]
    /\ owner \in [Msg -> [Subs -> Consumers \cup {NoOne}]]
    /\ attached \in [Consumers -> BOOLEAN]
    /\ exists \in [Subs -> BOOLEAN]
    /\ published \subseteq Msg
    /\ subsAt \in [Msg -> SUBSET Subs]
    /\ inflight \in [Consumers -> SUBSET Msg]

Init ==
    /\ st = [m \in Msg |-> [s \in Subs |-> "ABSENT"]]
    /\ owner = [m \in Msg |-> [s \in Subs |-> NoOne]]
    /\ attached = [c \in Consumers |-> FALSE]
    /\ exists = [s \in Subs |-> s # "nondurable"]
    /\ published = {}
    /\ subsAt = [m \in Msg |-> {}]
    /\ inflight = [c \in Consumers |-> {}]

(* Publish: write the message into working/ of every existing           *)
(* subscription (and of its ancestors' -- one topic here) and rename     *)
(* each copy into target/.  A transacted publish would make all copies   *)
(* NEW at its point of no return; the copies appear together.            *)
Publish(m) ==
    /\ m \notin published
    /\ published' = published \cup {m}
    /\ st' = [st EXCEPT ![m] = [s \in Subs |-> IF s \in FanOut THEN "NEW" ELSE "ABSENT"]]
    /\ subsAt' = [subsAt EXCEPT ![m] = {s \in Subs : exists[s]}]
    /\ UNCHANGED <<owner, attached, exists, inflight>>

(* Attach: a consumer opens on its subscription; a non-durable          *)
(* subscription directory is created now (it sees later messages only). *)
Attach(c) ==
    /\ ~attached[c]
    /\ attached' = [attached EXCEPT ![c] = TRUE]
    /\ exists' = [exists EXCEPT ![SubOf(c)] = TRUE]
    /\ UNCHANGED <<st, owner, published, subsAt, inflight>>

(* Claim: rename .subscriptions/<subId>/target -> processing; for the   *)
(* shared subscription the consumers race and exactly one wins.          *)
Claim(c, m) ==
    /\ attached[c] /\ st[m][SubOf(c)] = "NEW"
    /\ st' = [st EXCEPT ![m][SubOf(c)] = "DELIVERED"]
    /\ owner' = [owner EXCEPT ![m][SubOf(c)] = c]
    /\ inflight' = [inflight EXCEPT ![c] = @ \cup {m}]
    /\ UNCHANGED <<attached, exists, published, subsAt>>

(* Ack: rename processing -> processed.                                   *)
Ack(c, m) ==
    /\ attached[c] /\ st[m][SubOf(c)] = "DELIVERED" /\ owner[m][SubOf(c)] = c
    /\ st' = [st EXCEPT ![m][SubOf(c)] = "ACKNOWLEDGED"]
    /\ owner' = [owner EXCEPT ![m][SubOf(c)] = NoOne]
    /\ inflight' = [inflight EXCEPT ![c] = @ \ {m}]
    /\ UNCHANGED <<attached, exists, published, subsAt>>

(* Detach: the consumer closes (or dies and is recovered): its unacked   *)
(* copies go back to target/ redelivered (ReturnedOnClose: its own, not  *)
(* a fellow shared consumer's); the non-durable subscription is removed  *)
(* with all its files.                                                   *)
Detach(c) ==
    LET s == SubOf(c) IN
    /\ attached[c]
    /\ attached' = [attached EXCEPT ![c] = FALSE]
    /\ inflight' = [inflight EXCEPT ![c] = {}]
    /\ IF RemovedOnClose(s)
       THEN /\ exists' = [exists EXCEPT ![s] = FALSE]
            /\ st' = [m \in Msg |-> [st[m] EXCEPT ![s] = "ABSENT"]]
            /\ owner' = [m \in Msg |-> [owner[m] EXCEPT ![s] = NoOne]]
            /\ subsAt' = [m \in Msg |-> subsAt[m] \ {s}]   \* a new one starts empty
       ELSE /\ st' = [m \in Msg |-> [st[m] EXCEPT ![s] =
                        IF ReturnedOnClose(c, m, s) THEN "NEW" ELSE @]]
            /\ owner' = [m \in Msg |-> [owner[m] EXCEPT ![s] =
                        IF ReturnedOnClose(c, m, s) THEN NoOne ELSE @]]
            /\ UNCHANGED <<exists, subsAt>>
    /\ UNCHANGED published

Next ==
    \/ \E m \in Msg : Publish(m)
    \/ \E c \in Consumers : Attach(c) \/ Detach(c)
    \/ \E c \in Consumers, m \in Msg : Claim(c, m) \/ Ack(c, m)

Spec == Init /\ [][Next]_vars
FairSpec ==
    /\ Spec
    \* per consumer, not per (consumer, message): TLC's liveness checking is
    \* exponential in the number of fairness conjuncts
    /\ \A c \in Consumers : SF_vars(\E m \in Msg : Claim(c, m)) /\ SF_vars(\E m \in Msg : Ack(c, m))
    /\ \A c \in Consumers : WF_vars(Attach(c))

(* A durable subscription has a copy of every published message, kept   *)
(* (NEW, DELIVERED or ACKNOWLEDGED) whether or not a consumer is on it.  *)
DurableKeeps ==
    \A m \in published : \A s \in {"durable", "shared"} : st[m][s] # "ABSENT"

(* Every subscription that existed when m was published got its copy,    *)
(* and keeps it while it exists (a removed one drops out of subsAt).     *)
CopyPerSubscription ==
    \A m \in published : \A s \in subsAt[m] : st[m][s] # "ABSENT"

(* A non-durable subscription lives only while its consumer is attached. *)
NonDurableDiesWithConsumer == exists["nondurable"] => attached[NonDurableCons]

(* A copy is delivered to at most one consumer, one of its subscription.*)
OneConsumerPerCopy ==
    \A m \in Msg, s \in Subs :
        (st[m][s] = "DELIVERED") <=> (owner[m][s] # NoOne /\ SubOf(owner[m][s]) = s)

(* Every copy a consumer's session holds is still DELIVERED to it: no    *)
(* other consumer's close (nor anything else) takes it away meanwhile.   *)
HoldersKeepCopies ==
    \A c \in Consumers : \A m \in inflight[c] :
        st[m][SubOf(c)] = "DELIVERED" /\ owner[m][SubOf(c)] = c

(* Nothing is delivered to a detached consumer.                          *)
OnlyAttachedHold ==
    \A m \in Msg, s \in Subs : owner[m][s] # NoOne => attached[owner[m][s]]

(* Liveness: while consumers keep coming back, every durable copy is     *)
(* eventually acknowledged.                                              *)
DurableEventuallyAcked ==
    \A m \in Msg : \A s \in {"durable", "shared"} :
        (st[m][s] = "NEW") ~> (st[m][s] = "ACKNOWLEDGED")
(* TLC figures: see spec/README.md (spec check prints them per model).    *)
=============================================================================
