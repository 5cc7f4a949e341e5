----------------------------- MODULE DropboxMC -----------------------------
(***************************************************************************)
(* Model-checking wrapper for Dropbox: the constant operators the .cfg     *)
(* files cannot write literally, and the mutants.  Each mutant config in   *)
(* spec/mutants/ overrides exactly ONE definition of Dropbox with one of   *)
(* the Mutant* operators below (CONSTANT Def <- MutantDef) and must be     *)
(* rejected by TLC with the property named in its header.                  *)
(***************************************************************************)
EXTENDS Dropbox

(* Every consumer may run with any acknowledge mode (chosen in Init).   *)
AnyMode == [c \in Consumer |-> AckModes]
(* Any mode but TRANSACTED (whose commit window the refinement guards).  *)
AnyButTx == [c \in Consumer |-> AckModes \ {"TRANSACTED"}]
(* Consumer modes for the liveness model (no symmetry: fixed modes).    *)
AutoAndTx == [c \in Consumer |-> IF c = CHOOSE x \in Consumer : TRUE
                                 THEN {"AUTO"} ELSE {"TRANSACTED"}]
ClientAndAuto == [c \in Consumer |-> IF c = CHOOSE x \in Consumer : TRUE
                                     THEN {"CLIENT"} ELSE {"AUTO"}]
ClientAndTx == [c \in Consumer |-> IF c = CHOOSE x \in Consumer : TRUE
                                   THEN {"CLIENT"} ELSE {"TRANSACTED"}]
(* Trace validation: a consumer's mode is not in the trace; DUPS_OK acts  *)
(* on disk as AUTO does, so three choices cover it (the generated trace   *)
(* module narrows them per trace to those the trace does not rule out).   *)
AnyTraceMode == [c \in Consumer |-> {"AUTO", "CLIENT", "TRANSACTED"}]
OnlyClient == [c \in Consumer |-> {"CLIENT"}]
OnlyAuto == [c \in Consumer |-> {"AUTO", "DUPS_OK"}]
OnlyTx == [c \in Consumer |-> {"TRANSACTED"}]

(* A state constraint for models whose races safety_race already covers:   *)
(* no listing keeps an entry that has left target/.  A stale entry can only *)
(* be dropped (LoseRace); a listing that merely misses newer entries stays. *)
ListingsCurrent == \A c \in Consumer : \A m \in listing[c] : In(m, "target")

(* ---- the mutants (one decision each, as 1.2 or a naive port gets it) ---- *)
\* claim by copy instead of rename
MutantClaimFiles(f, g) == fs \cup {g}
\* the producer writes straight into target/
MutantCreateDir == "target"
\* AUTO acknowledges before the listener ran (DropboxMQ 1.2)
MutantAckBeforeListener == TRUE
\* CLIENT acknowledge(m) acknowledges only the messages up to m (DropboxMQ 1.2)
MutantClientAckScope(c, i) == Range(SubSeq(held[c], 1, i))
\* recovery returns the file under its old name: no redelivered flag
MutantRedeliverCount(f) == f.n
\* commit applies its renames with the log still in associated/: no point of no return
MutantCommitLogDir == "associated"
\* recovery rolls every log back, even one in committing/
MutantRollForwardDirs == {}
\* recover()/rollback() renames the session's messages to processed/ instead of target/
MutantAckingPcs == {"acking", "commit", "recover", "rollback"}
\* a transacted commit renames its receives to processed/ while its log is in associated/
MutantEarlyAckLogDirs == {"associated"}
\* the orphan sweep takes processing/ files of a consumer that is still alive
MutantOwnerGone(c) == TRUE
\* dead-letters at the limit: `>=` for `>` (the last allowed delivery is never made)
MutantOverLimit(f) == f.n + 1 >= MaxDel
\* the expiry sweep also expires processing/ files: a message a live session is processing
MutantSweepExpiresHeld == TRUE
\* CLIENT acknowledge() renames processing/* without its client prefix: other consumers' files
MutantAckMatches(c, f) == TRUE
\* a consumer claims a message before its delivery time (ignores the delivery delay)
MutantReady(m) == TRUE
(***************************************************************************)
(***************************************************************************)
(* TLC figures for the mutants and witnesses (1 worker, `spec check`):     *)
(*   mutant / witness                   states  secs  rejected by          *)
(*   copy_claim                            268   3.1  12 OneState          *)
(*   copy_claim_sessions                 2,516   4.7  12 NoDoubleDelivery  *)
(*   create_in_target                        5   2.5  12 CompleteBeforeVisible *)
(*   ack_before_listener                   483   3.9  12 AckOnlyAfterProcessed *)
(*   client_ack_up_to                      618   4.5  13 ClientAckAll      *)
(*   no_redelivered_flag                   828   5.8  13 Refinement        *)
(*   no_redelivered_flag_impl            1,339   4.3  12 RedeliveredFlag   *)
(*   no_point_of_no_return                 195   3.2  12 TxAtomicity       *)
(*   recovery_rolls_back_committing        237   3.4  12 NoLoss            *)
(*   issue 26 (2026-11-26, states; rejected by):                           *)
(*   dead_letter_at_limit                   45       13 DeadLetterOnlyOverLimit *)
(*   expire_held                         1,845       13 ExpiryNotFromHolder *)
(*   early_delivery                        254       13 NoEarlyDelivery    *)
(*   client_ack_glob                     2,823       12 AckOnlyAfterProcessed *)
(*   client_ack_glob_owner               2,823       13 NoSpuriousAck      *)
(*   witness redelivery_reachable        5,059   3.5  12 WitnessNoRedelivery *)
(*   witness dead_letter_reachable       3,432   3.9  12 WitnessNoDeadLetter *)
(*   witness roll_forward_reachable        232   2.9  12 WitnessNoRollForward *)
(*   witness tx_commit_reachable           175   2.4  12 WitnessNoTxCommit *)
(***************************************************************************)
=============================================================================
