------------------------------- MODULE Lease -------------------------------
(***************************************************************************)
(* Leases and fencing: consumers on several hosts of one dropbox, where    *)
(* flock does not cross mounts (sshfs, many NFS setups), so an owner's     *)
(* liveness is a lease in the shared root (issue 28).  In the style of     *)
(* Lamport's TCommit/TwoPhase: one action per move; the moves keep the     *)
(* lifecycle table's names (Claim, LoseRace, Ack, Redeliver).              *)
(*                                                                         *)
(* Files: target/<m>;<n>, processing/<owner>~<m>;<n>, processed/<m>;<n>,    *)
(* where n is the delivery count the claim stamps into the name (D7): a    *)
(* redelivered message is claimed under a new name, so a consumer's own    *)
(* name at the destination is its own and no other delivery's.             *)
(*                                                                         *)
(* Time is abstract.  since[o] counts ticks of owner o's clock since its   *)
(* last renewal; o's lease is valid while since[o] < L.  The recoverer     *)
(* keeps, per owner, age[o]: ticks of ITS clock since it last saw o's      *)
(* lease change.  Clocks are not synchronised; their rates differ by at    *)
(* most Drift ticks over a lease (TickObserver's guard).  The recoverer    *)
(* declares o dead only after it has seen the lease unchanged for L +      *)
(* Drift ticks of its own clock -- never by comparing a timestamp the      *)
(* owner wrote with its own clock.                                         *)
(*                                                                         *)
(* Self-fencing: an owner whose lease ran out (since >= L) never renews    *)
(* again (it stops; a new session is a new owner) and starts no claim or   *)
(* acknowledgement.  A move it started while valid may still land late     *)
(* (a paused process, a delayed NFS request: time passes between the       *)
(* check and the rename).  Fencing by construction: recovery renamed the   *)
(* owner's processing/<owner>~ file away, so the late rename finds no      *)
(* source and the acknowledgement is an error.                              *)
(*                                                                         *)
(* Unknown outcome: an NFS RENAME retransmitted after the server did it is *)
(* answered ENOENT.  Any rename here may answer ENOENT after succeeding;   *)
(* the consumer resolves ENOENT by looking for its own name at the         *)
(* destination.                                                             *)
(*                                                                         *)
(* Owners never die here: a crashed or partitioned owner is one that stops *)
(* renewing and taking steps, which the model already allows (no          *)
(* fairness), so every owner is "live" and LeaseRespected is the stronger  *)
(* "no valid lease is declared dead".  The same construction fences a late *)
(* commit (its log renamed out of associated/ by recovery) and a late send *)
(* (its working/ file quarantined); only the acknowledgement is modelled.  *)
(*                                                                         *)
(* The definitions the mutants override (spec/mutants/lease_*.cfg):       *)
(*   WaitFor        the recoverer's bound (mutant: L, ignoring the drift)   *)
(*   EnoentIsDone   an ack answered ENOENT is taken as done (mutant: TRUE) *)
(*   ClaimByLink    a claim is link + unlink, not a rename (mutant: TRUE)  *)
(*   LooksForOwnName a claim answered ENOENT looks for its own name        *)
(*                  (mutant: FALSE -- taken as a lost race)                *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS Msg, Owner, NoOne, L, Drift, MaxDel

ASSUME L \in Nat /\ L >= 1 /\ Drift \in Nat /\ MaxDel \in Nat /\ MaxDel >= 1

VARIABLES
    fs,      \* the directory entries: records [d, m, n, o]
    pc,      \* pc[o]: "idle" | "claim" (rename in flight) | "unlink" (link mutant) |
             \*        "claimENOENT" | "ack" (rename in flight) | "ackENOENT"
    cur,     \* cur[o]: the file o's claim listed (<<m, n>> in target/)
    held,    \* held[o]: the delivery o's application holds, <<m, n>> or <<>>
    since,   \* since[o]: o's clock since its last renewal (capped at L)
    age,     \* age[o]: the recoverer's clock since it saw o's lease change (capped)
    fresh,   \* fresh[o]: o renewed since the recoverer last read its lease
    dead,    \* dead[o]: the recoverer has declared o dead (for good)
    delivered, \* history: every delivery <<m, n>> handed to an application
    ackOk    \* history: every <<o, m, n>> whose acknowledge() reported success

vars == <<fs, pc, cur, held, since, age, fresh, dead, delivered, ackOk>>

(* The definitions the mutants override.                                   *)
WaitFor == L + Drift
MutantWaitFor == L
EnoentIsDone == FALSE
MutantEnoentIsDone == TRUE
ClaimByLink == FALSE
MutantClaimByLink == TRUE
LooksForOwnName == TRUE
MutantLooksForOwnName == FALSE

Cap == L + Drift
File(d, m, n, o) == [d |-> d, m |-> m, n |-> n, o |-> o]
Target(m, n) == File("target", m, n, NoOne)
Processing(o, m, n) == File("processing", m, n, o)
Processed(m, n) == File("processed", m, n, NoOne)
Valid(o) == since[o] < L
Acked(m) == \E f \in fs : f.m = m /\ f.d = "processed"
Hold(o, m, n) ==
    /\ held' = [held EXCEPT ![o] = <<m, n>>]
    /\ delivered' = delivered \cup {<<m, n>>}

TypeOK ==
    /\ fs \subseteq [d : {"target", "processing", "processed"}, m : Msg, n : 0..MaxDel, o : Owner \cup {NoOne}]
    /\ pc \in [Owner -> {"idle", "claim", "unlink", "claimENOENT", "ack", "ackENOENT"}]
    /\ since \in [Owner -> 0..L] /\ age \in [Owner -> 0..Cap]
    /\ fresh \in [Owner -> BOOLEAN] /\ dead \in [Owner -> BOOLEAN]

Init ==
    /\ fs = {Target(m, 0) : m \in Msg}
    /\ pc = [o \in Owner |-> "idle"]
    /\ cur = [o \in Owner |-> <<>>]
    /\ held = [o \in Owner |-> <<>>]
    /\ since = [o \in Owner |-> 0]
    /\ age = [o \in Owner |-> 0]
    /\ fresh = [o \in Owner |-> FALSE]
    /\ dead = [o \in Owner |-> FALSE]
    /\ delivered = {} /\ ackOk = {}

---------------------------------------------------------------------------
(* The owner.                                                              *)

(* The lease is rewritten (never after it ran out: self-fencing).          *)
Renew(o) ==
    /\ Valid(o)
    /\ since' = [since EXCEPT ![o] = 0]
    /\ fresh' = [fresh EXCEPT ![o] = TRUE]
    /\ UNCHANGED <<fs, pc, cur, held, age, dead, delivered, ackOk>>

(* readdir(target/) and the lease checked: a claim starts.                 *)
List(o) ==
    /\ Valid(o) /\ pc[o] = "idle" /\ held[o] = <<>>
    /\ \E f \in fs :
        /\ f.d = "target" /\ f.n < MaxDel
        /\ cur' = [cur EXCEPT ![o] = <<f.m, f.n>>]
        \* the link mutant: link(target/m;n, processing/o~m;n+1), the source stays
        /\ fs' = IF ClaimByLink THEN fs \cup {Processing(o, f.m, f.n + 1)} ELSE fs
    /\ pc' = [pc EXCEPT ![o] = IF ClaimByLink THEN "unlink" ELSE "claim"]
    /\ UNCHANGED <<held, since, age, fresh, dead, delivered, ackOk>>

(* rename(target/m;n, processing/o~m;n+1): when the source is there it is  *)
(* renamed, and the answer is OK or (a retransmitted RENAME) ENOENT;        *)
(* otherwise ENOENT.                                                        *)
Claim(o) ==
    /\ pc[o] = "claim"
    /\ LET m == cur[o][1]  n == cur[o][2] IN
       IF Target(m, n) \in fs
       THEN /\ fs' = (fs \ {Target(m, n)}) \cup {Processing(o, m, n + 1)}
            /\ \/ Hold(o, m, n + 1) /\ pc' = [pc EXCEPT ![o] = "idle"]
               \/ pc' = [pc EXCEPT ![o] = "claimENOENT"] /\ UNCHANGED <<held, delivered>>
       ELSE /\ pc' = [pc EXCEPT ![o] = "claimENOENT"]
            /\ UNCHANGED <<fs, held, delivered>>
    /\ UNCHANGED <<cur, since, age, fresh, dead, ackOk>>

(* The link mutant's second half: unlink(target/m;n).  The loser's         *)
(* ENOENT is a lost race; its link stays in processing/.                    *)
Unlink(o) ==
    /\ pc[o] = "unlink"
    /\ LET m == cur[o][1]  n == cur[o][2] IN
       IF Target(m, n) \in fs
       THEN /\ fs' = fs \ {Target(m, n)}
            /\ Hold(o, m, n + 1)
       ELSE UNCHANGED <<fs, held, delivered>>
    /\ pc' = [pc EXCEPT ![o] = "idle"]
    /\ UNCHANGED <<cur, since, age, fresh, dead, ackOk>>

(* ENOENT from the claim: look for the own name processing/o~m;n+1.        *)
LookForClaim(o) ==
    /\ pc[o] = "claimENOENT"
    /\ LET m == cur[o][1]  n == cur[o][2] IN
       /\ LooksForOwnName
       /\ Processing(o, m, n + 1) \in fs
       /\ Hold(o, m, n + 1)
    /\ pc' = [pc EXCEPT ![o] = "idle"]
    /\ UNCHANGED <<fs, cur, since, age, fresh, dead, ackOk>>

(* ENOENT, and the own name is not there (or, mutant, not looked for):     *)
(* someone else claimed it.                                                 *)
LoseRace(o) ==
    /\ pc[o] = "claimENOENT"
    /\ LooksForOwnName => Processing(o, cur[o][1], cur[o][2] + 1) \notin fs
    /\ pc' = [pc EXCEPT ![o] = "idle"]
    /\ UNCHANGED <<fs, cur, held, since, age, fresh, dead, delivered, ackOk>>

(* acknowledge() called, the lease checked (self-fencing).                 *)
Acknowledge(o) ==
    /\ Valid(o) /\ pc[o] = "idle" /\ held[o] # <<>>
    /\ pc' = [pc EXCEPT ![o] = "ack"]
    /\ UNCHANGED <<fs, cur, held, since, age, fresh, dead, delivered, ackOk>>

(* rename(processing/o~m;n, processed/m;n) -- perhaps long after the check. *)
Ack(o) ==
    /\ pc[o] = "ack"
    /\ LET m == held[o][1]  n == held[o][2] IN
       IF Processing(o, m, n) \in fs
       THEN /\ fs' = (fs \ {Processing(o, m, n)}) \cup {Processed(m, n)}
            /\ \/ ackOk' = ackOk \cup {<<o, m, n>>} /\ pc' = [pc EXCEPT ![o] = "idle"]
                                                    /\ held' = [held EXCEPT ![o] = <<>>]
               \/ pc' = [pc EXCEPT ![o] = "ackENOENT"] /\ UNCHANGED <<ackOk, held>>
       ELSE /\ pc' = [pc EXCEPT ![o] = "ackENOENT"]
            /\ UNCHANGED <<fs, ackOk, held>>
    /\ UNCHANGED <<cur, since, age, fresh, dead, delivered>>

(* ENOENT from the ack: look for the own name processed/m;n.  There: the   *)
(* ack was done.  Not there: recovery took the message -- an error (the    *)
(* mutant reports success: "already acknowledged").                        *)
AckDone(o) ==
    /\ pc[o] = "ackENOENT"
    /\ LET m == held[o][1]  n == held[o][2] IN
       ackOk' = IF Processed(m, n) \in fs \/ EnoentIsDone THEN ackOk \cup {<<o, m, n>>} ELSE ackOk
    /\ pc' = [pc EXCEPT ![o] = "idle"]
    /\ held' = [held EXCEPT ![o] = <<>>]
    /\ UNCHANGED <<fs, cur, since, age, fresh, dead, delivered>>

---------------------------------------------------------------------------
(* Time and the recoverer.                                                 *)

(* The owners' clocks advance (a lease that ran out stays run out).        *)
TickOwners ==
    /\ \E o \in Owner : since[o] < L
    /\ since' = [o \in Owner |-> IF since[o] < L THEN since[o] + 1 ELSE L]
    /\ UNCHANGED <<fs, pc, cur, held, age, fresh, dead, delivered, ackOk>>

(* The recoverer's clock advances; over what it measures of an unchanged   *)
(* lease it runs ahead of that owner's clock by at most Drift ticks.        *)
TickObserver ==
    /\ \E o \in Owner : age[o] < Cap
    /\ \A o \in Owner : ~fresh[o] /\ age[o] < Cap => age[o] + 1 <= since[o] + Drift
    /\ age' = [o \in Owner |-> IF age[o] < Cap THEN age[o] + 1 ELSE Cap]
    /\ UNCHANGED <<fs, pc, cur, held, since, fresh, dead, delivered, ackOk>>

(* The recoverer reads o's lease and sees it changed: it measures afresh.  *)
ReadLease(o) ==
    /\ fresh[o]
    /\ fresh' = [fresh EXCEPT ![o] = FALSE]
    /\ age' = [age EXCEPT ![o] = 0]
    /\ UNCHANGED <<fs, pc, cur, held, since, dead, delivered, ackOk>>

(* ... or unchanged for WaitFor ticks of its own clock: o is dead.         *)
DeclareDead(o) ==
    /\ ~fresh[o] /\ ~dead[o] /\ age[o] >= WaitFor
    /\ dead' = [dead EXCEPT ![o] = TRUE]
    /\ UNCHANGED <<fs, pc, cur, held, since, age, fresh, delivered, ackOk>>

(* Recovery returns a dead owner's claim: rename to target/ (no replace).  *)
Redeliver(o) ==
    /\ dead[o]
    /\ \E f \in fs :
        /\ f.d = "processing" /\ f.o = o
        /\ Target(f.m, f.n) \notin fs
        /\ fs' = (fs \ {f}) \cup {Target(f.m, f.n)}
    /\ UNCHANGED <<pc, cur, held, since, age, fresh, dead, delivered, ackOk>>

Next ==
    \/ \E o \in Owner :
        \/ Renew(o) \/ List(o) \/ Claim(o) \/ Unlink(o) \/ LookForClaim(o) \/ LoseRace(o)
        \/ Acknowledge(o) \/ Ack(o) \/ AckDone(o)
        \/ ReadLease(o) \/ DeclareDead(o) \/ Redeliver(o)
    \/ TickOwners \/ TickObserver

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
(* Properties.                                                             *)

(* An owner whose lease is valid is never declared dead, so its messages   *)
(* are never taken (Redeliver needs dead).  Mutant: lease_early_declare.   *)
LeaseRespected == \A o \in Owner : Valid(o) => ~dead[o]

(* An acknowledge() that reports success renamed its own claim into        *)
(* processed/: a late acknowledgement of a message recovery took is an     *)
(* error, never a success.  Mutant: lease_late_ack_succeeds.               *)
LateAckFails == \A a \in ackOk : Processed(a[2], a[3]) \in fs

(* No acknowledged message is delivered again: no delivery has a count    *)
(* above the one of its processed/ file.  Mutant: lease_link_claim.        *)
NoAckedDeliveredAgain ==
    \A d \in delivered, f \in fs : f.d = "processed" /\ f.m = d[1] => d[2] <= f.n

(* A message whose only file is a valid owner's claim is known to that     *)
(* owner (held, or its claim's outcome being resolved): otherwise nobody   *)
(* delivers it and nobody recovers it while the lease is renewed.          *)
(* Mutant: lease_enoent_claim_lost.                                         *)
NoStrandedClaim ==
    \A f \in fs :
        (f.d = "processing" /\ Valid(f.o) /\ \A g \in fs : g.m = f.m => g = f)
        => \/ held[f.o] = <<f.m, f.n>>
           \/ pc[f.o] \in {"claimENOENT", "unlink"} /\ cur[f.o] = <<f.m, f.n - 1>>

(* Nothing lost: every message has a file.                                  *)
NoLoss == \A m \in Msg : \E f \in fs : f.m = m

(* No message is acknowledged twice (follows from the two above; the       *)
(* mutants of either break it too, so it is checked by the models only).   *)
AckedOnce == \A a, b \in ackOk : a[2] = b[2] => a = b

(* Reachability: recovery does take a (falsely) suspected owner's claim    *)
(* while that owner still means to acknowledge it.                         *)
WitnessNoFencedAck == \A o \in Owner : ~(pc[o] = "ackENOENT" /\ dead[o] /\ Processed(held[o][1], held[o][2]) \notin fs)

Symmetry == Permutations(Owner)
=============================================================================
