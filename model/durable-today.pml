/*
 * Model 1: a durable, transactional route as the code runs it today
 * (`@Idempotent({ durable: true, transactional: true })`: the engine of engine/, the recovery in
 * idempotency-recovery.ts, the transaction in idempotency-transaction.ts, the settlement in
 * claim-settlement.ts; TypeOrmIdempotencyStore on PostgreSQL).
 *
 * begin(): the fast claim (Redis), then a separate, committed claim of the durable row
 * (confirmDurable → INSERT … ON CONFLICT DO NOTHING). execute(): one transaction that locks the
 * row (SELECT … FOR UPDATE), runs the handler (its writes join the transaction), completes the
 * row in it, and commits; the fast tier follows (mirrorCompletion). The durable row is the
 * authority; the fast record is a cache the engine repairs from it.
 */

/* On a durable route the fast tier is a cache: it may only ever copy the committed row. */
#define FAST_FENCE(t) skip
#define FAST_COMPLETED_WITH(t, v) CHECK(outcome_from_handler, row.state == COMPLETED && row.out == v)
#define FAST_SUPERSEDE(old, new) skip
#define FAST_LOST(owner) skip
#define FREEZE_OWNER(w) \
  if :: fast.state == IN_PROGRESS && fast.owner == w -> fast.live = false :: else -> skip fi; \
  if :: row.state == IN_PROGRESS && row.owner == w -> row.live = false :: else -> skip fi
#define SEEN_ROW_NOT_TI(r) seenRow[r] != ti
#define MODEL_REFS(i) (row.owner != i && lockBy != i && EACH_REQUESTER(SEEN_ROW_NOT_TI, AND))
#define ENDATTEMPT_MODEL(c) seenRow[c] = 0

#include "common.pml"

Record row;                       /* the durable row, as committed */
byte seenRow[REQUESTERS];         /* the row owner a request read (recoverDurableRow's expected token) */
byte lockBy;                      /* the token whose open transaction holds the row lock (0: none) */
bool txEff;                       /* that transaction wrote the business effect (uncommitted) */
byte txOut;                       /* that transaction completed the row with this outcome (uncommitted) */

#define ROW_FENCE(t) CHECK(fencing, !superseded[t])
#define ROW_SUPERSEDE(old, new) if :: old != 0 && old != new -> superseded[old] = true :: else -> skip fi

/* DurableIdempotencyStore.claim (TypeOrmIdempotencyStore.acquire: INSERT … ON CONFLICT DO NOTHING RETURNING) */
#define ROW_CLAIMABLE (KEEP(row.state == ABSENT) /* guard:durable-claim-if-absent */)
inline rowCreate(t) {
  ROW_SUPERSEDE(row.owner, t);
  row.state = IN_PROGRESS; row.owner = t; row.live = true; row.out = O_NONE
}

/* DurableIdempotencyStore.takeOver: UPDATE … WHERE owner_token = expected AND in_progress AND lease lapsed */
#define ROW_TAKEABLE(c) (row.state == IN_PROGRESS && KEEP(row.owner == seenRow[c]) /* guard:durable-takeover-owner */ && \
                         KEEP(!row.live) /* guard:durable-takeover-lease */)
inline rowTake(t) {
  ROW_SUPERSEDE(row.owner, t);
  row.owner = t; row.live = true
}

/* DurableIdempotencyStore.complete: UPDATE … WHERE owner_token AND state = 'in_progress' */
#define ROW_OWNED_FOR_COMPLETE(t) (row.state == IN_PROGRESS && KEEP(row.owner == t) /* guard:durable-complete-owner */)
/* DurableIdempotencyStore.release: DELETE … WHERE owner_token AND state = 'in_progress' */
#define ROW_OWNED_FOR_RELEASE(t) (row.state == IN_PROGRESS && KEEP(row.owner == t) /* guard:durable-release-owner */)
/* DurableIdempotencyStore.transaction: SELECT … WHERE owner_token AND in_progress FOR UPDATE (lockOwned) */
#define ROW_OURS_TO_LOCK(t) (row.state == IN_PROGRESS && KEEP(row.owner == t) /* guard:transaction-owner */)

/* COMMIT of the open transaction: its effect and its completion become visible together. */
inline txCommit() {
  committed = committed + txEff;
  CHECK(at_most_one_effect, committed <= 1);
  if
  :: txOut != O_NONE -> ROW_FENCE(lockBy); row.state = COMPLETED; row.live = false; row.out = txOut
  :: else -> skip
  fi;
  lockBy = 0; txEff = false; txOut = O_NONE
}

/* ROLLBACK (or a session the database drops): nothing of the transaction stays. */
inline txRollback() {
  lockBy = 0; txEff = false; txOut = O_NONE
}

/* The client gets the handler's response, unless an outer layer answered first or it left. */
inline answerFresh(c, t, o) {
  if
  :: MAY(OUTER) -> events++; printf("[%c] an outer layer answers, or the client leaves: no final answer\n", NAME(c)); retryLater(c, t)
  :: o == O_TRANSIENT -> printf("[%c] told 5xx\n", NAME(c)); retryLater(c, t)
  :: o != O_TRANSIENT -> printf("[%c] told (fresh): ", NAME(c)); sayOutcome(o); toldSuccess(o); answerFinal(c, t, o)
  fi
}

inline replay(c, t, o) {
  printf("[%c] told (replay): ", NAME(c)); sayOutcome(o); toldSuccess(o); answerFinal(c, t, o)
}

proctype Request(byte c) {
  byte t, out;
  bool answered;                  /* the COMMIT answered */
#ifdef PRE_17A_OUTER
  bool releaseAfterCommit;
#endif
  if
  :: c == PROBER -> CLIENTS_DONE
  :: else -> skip
  fi;
again:
  {
    /* begin() → decide() → IdempotencyStore.claim (CLAIM_SCRIPT), then judge() */
    atomic {
      startAttempt(c, t);
      printf("[%c] a request, owner token %d: IdempotencyStore.claim\n", NAME(c), t);
      if
      :: fast.state == ABSENT -> fastCreate(t); printf("[%c]   claimed\n", NAME(c)); goto confirm
      :: fast.state == COMPLETED -> out = fast.out; replay(c, t, out)
      :: fast.state == IN_PROGRESS && fast.live ->
         seenFast[c] = fast.owner; printf("[%c]   in progress, lease live\n", NAME(c)); goto committedAnswer
      :: fast.state == IN_PROGRESS && !fast.live ->
         seenFast[c] = fast.owner; printf("[%c]   in progress, lease of token %d lapsed\n", NAME(c), fast.owner); goto recoverFast
      fi
    }
committedAnswer:
    /* committedAnswer() → DurableIdempotencyStore.get */
    atomic {
      printf("[%c] committedAnswer(): DurableIdempotencyStore.get\n", NAME(c));
      if
      :: row.state == COMPLETED && row.owner == seenFast[c] -> out = row.out; goto committedRepair
      :: row.state == COMPLETED && row.owner != seenFast[c] -> out = row.out; seenFast[c] = 0; replay(c, t, out)
      :: row.state != COMPLETED -> printf("[%c]   not completed: told 409\n", NAME(c)); retryLater(c, t)
      fi
    }
committedRepair:
    /* committedAnswer() → IdempotencyStore.complete(id, record.ownerToken, row.response) */
    atomic {
      fastCallComplete(seenFast[c], out, ok); printf("[%c] committedAnswer(): IdempotencyStore.complete of the row's claim: ", NAME(c)); sayStoreAnswer(ok); ok = 0; seenFast[c] = 0;
      replay(c, t, out)
    }
recoverFast:
    /* recoverThroughDurable() → IdempotencyStore.takeOver (TAKE_OVER_SCRIPT) */
    atomic {
      printf("[%c] recoverThroughDurable(): IdempotencyStore.takeOver\n", NAME(c));
      if
      :: fast.state == ABSENT -> seenFast[c] = 0; fastCreate(t); goto confirm
      :: fast.state == IN_PROGRESS && KEEP(fast.owner == seenFast[c]) /* guard:takeover-owner */ && KEEP(!fast.live) /* guard:takeover-lease */ ->
         seenFast[c] = 0; fastTake(t); printf("[%c]   taken over\n", NAME(c)); goto confirm
      :: else ->
         seenFast[c] = 0;
         if /* judge(afterTakeover) */
         :: fast.state == COMPLETED -> out = fast.out; replay(c, t, out)
         :: else -> printf("[%c]   told 409\n", NAME(c)); retryLater(c, t)
         fi
      fi
    }
confirm:
    /* confirmDurable() → DurableIdempotencyStore.claim (INSERT … ON CONFLICT DO NOTHING) */
    atomic {
      printf("[%c] confirmDurable(): DurableIdempotencyStore.claim\n", NAME(c));
      if
      :: ROW_CLAIMABLE -> rowCreate(t); tokSt[t] = T_HB; printf("[%c]   claimed; hold(): heartbeat on\n", NAME(c)); goto transaction
      :: row.state == COMPLETED -> out = row.out; goto answerRepair
      :: row.state == IN_PROGRESS && row.live -> goto answerRelease
      :: row.state == IN_PROGRESS && !row.live -> seenRow[c] = row.owner; goto recoverRow
      fi
    }
recoverRow:
    /* recoverDurableRow() → DurableIdempotencyStore.takeOver: waits up to lockTimeoutMs for the
       row lock of a live transaction, then answers the row as committed ('existing') */
    if
    :: atomic {
         lockBy == 0 ->
         printf("[%c] recoverDurableRow(): DurableIdempotencyStore.takeOver\n", NAME(c));
         if
         :: row.state == ABSENT -> seenRow[c] = 0; rowCreate(t); tokSt[t] = T_HB; goto transaction
         :: ROW_TAKEABLE(c) -> seenRow[c] = 0; rowTake(t); tokSt[t] = T_HB; printf("[%c]   taken over; hold(): heartbeat on\n", NAME(c)); goto transaction
         :: else ->
            seenRow[c] = 0;
            if /* answerFromDurable(taken.record) */
            :: row.state == COMPLETED -> out = row.out; goto answerRepair
            :: else -> goto answerRelease
            fi
         fi
       }
    :: atomic { lockBy != 0 -> seenRow[c] = 0; printf("[%c] recoverDurableRow(): DurableIdempotencyStore.takeOver: lock_timeout\n", NAME(c)); goto answerRelease }
    fi;
answerRepair:
    /* answerFromDurable() → IdempotencyStore.complete(id, fastOwnerToken, row.response) */
    atomic { fastCallComplete(t, out, ok); printf("[%c] answerFromDurable(): IdempotencyStore.complete (repair): ", NAME(c)); sayStoreAnswer(ok); ok = 0; replay(c, t, out) }
answerRelease:
    /* answerFromDurable() → IdempotencyStore.release(id, fastOwnerToken); 409 */
    atomic { fastCallRelease(t); printf("[%c] answerFromDurable(): IdempotencyStore.release; told 409\n", NAME(c)); retryLater(c, t) }
transaction:
    /* execute() on a transactional route (IdempotencyTransaction) → DurableIdempotencyStore.transaction: BEGIN; SELECT … FOR UPDATE;
       then Execution.run(manager): the handler, whose writes join the transaction; then, on a
       kept outcome, DurableIdempotencyStore.complete(…, transaction) inside it. All of it is
       private to the transaction until COMMIT, so it is one step here. */
    atomic {
      printf("[%c] DurableIdempotencyStore.transaction: BEGIN, lock the row\n", NAME(c));
      if
      :: ROW_OURS_TO_LOCK(t) && lockBy == 0 -> lockBy = t
      :: !ROW_OURS_TO_LOCK(t) -> printf("[%c]   IdempotencyClaimLostError: not run, told 409\n", NAME(c)); tokSt[t] = T_RUN; retryLater(c, t)
      fi;
      if
      :: out = O_OK; printf("[%c] handler: success (its write, uncommitted)\n", NAME(c))
      :: out = O_FAIL; printf("[%c] handler: wrote, then failed with a status the policy stores (402)\n", NAME(c))
      :: MAY(TRANSIENT) -> events++; out = O_TRANSIENT; printf("[%c] handler: wrote, then failed with a 5xx\n", NAME(c))
      fi;
      /* it wrote before it settled (a failure may come after a write): only a rollback undoes it */
      txEff = true;
      handlerOut[t] = out;
#ifdef PRE_17A_OUTER
      /* The engine before rule 17a: an outer layer's answer (408 first, or a 500 after the handler)
         was the response it classified: the handler's writes committed, then the key was released. */
      if
      :: out == O_OK && MAY(OUTER) -> events++; releaseAfterCommit = true; printf("[%c] (pre-17a) an outer layer answered: release after commit\n", NAME(c)); goto commit
      :: else -> skip
      fi;
#endif
      /* committed ⇔ completed (rule 17a): a failure or a released outcome rolls the writes back */
      if
      :: KEEP(out == O_OK) /* guard:rollback-on-failure */ -> skip
      :: else -> goto rollback
      fi;
      if
      :: ROW_OWNED_FOR_COMPLETE(t) -> CHECK(outcome_from_handler, out == handlerOut[t]); txOut = out; printf("[%c] DurableIdempotencyStore.complete in the transaction\n", NAME(c))
      :: else -> printf("[%c]   IdempotencyClaimLostError: rolled back, told 409\n", NAME(c)); txRollback(); tokSt[t] = T_RUN; retryLater(c, t)
      fi
    }
commit:
    /* DurableIdempotencyStore.transaction: COMMIT; then drop() ends the heartbeat */
    atomic {
      if
      :: printf("[%c] COMMIT\n", NAME(c)); txCommit(); answered = true
      :: MAY(UNKNOWN) -> events++; printf("[%c] COMMIT applied, its reply lost\n", NAME(c)); txCommit(); answered = false
      :: MAY(UNKNOWN) -> events++; txRollback(); answered = false; printf("[%c] COMMIT fails\n", NAME(c))
      fi;
      tokSt[t] = T_RUN;
#ifdef PRE_17A_OUTER
      if
      :: releaseAfterCommit -> releaseAfterCommit = false; answered = false; goto releaseRow
      :: else -> skip
      fi;
#endif
      if
      :: KEEP(answered) /* guard:commit-answered */ -> answered = false
      :: else -> printf("[%c]   'replaced' (store-unavailable): told 503, the claim is kept until its lease lapses\n", NAME(c)); retryLater(c, t)
      fi
    }
mirror:
    /* mirrorCompletion() → IdempotencyStore.complete(id, ownerToken, stored) */
    atomic {
      fastCallComplete(t, out, ok); printf("[%c] mirrorCompletion(): IdempotencyStore.complete: ", NAME(c)); sayStoreAnswer(ok);
      if
      :: ok == 0 -> goto restore
      :: else -> ok = 0; answerFresh(c, t, out)
      fi
    }
restore:
    /* mirrorCompletion() → IdempotencyStore.restore (RESTORE_SCRIPT) */
    atomic {
      if
      :: REDIS_CALL_FAILS -> events++
      :: true -> fastRestore(t, out); printf("[%c] mirrorCompletion(): IdempotencyStore.restore\n", NAME(c))
      fi;
      answerFresh(c, t, out)
    }
rollback:
    /* ROLLBACK; settle() → finish(): drop(), then decideOutcome() on the handler's own outcome */
    atomic {
      txRollback(); tokSt[t] = T_RUN; printf("[%c] ROLLBACK\n", NAME(c));
#ifdef PRE_17A_DISCONNECT
      /* the client left before the error was rendered: the engine stored the status it saw (200, no body) */
      if
      :: MAY(OUTER) -> events++; out = O_NO_BODY; printf("[%c] (pre-17a) the client left: the response seen is a 200 without body\n", NAME(c)); goto storeFailure
      :: else -> skip
      fi;
#endif
      if
      :: out == O_FAIL -> goto storeFailure
      :: else -> goto releaseRow
      fi
    }
storeFailure:
    /* completeClaim() → DurableIdempotencyStore.complete (its own statement, after the ROLLBACK) */
    atomic {
      if
      :: ROW_OWNED_FOR_COMPLETE(t) ->
         ROW_FENCE(t); CHECK(outcome_from_handler, out == handlerOut[t]); row.state = COMPLETED; row.live = false; row.out = out;
         printf("[%c] completeClaim(): DurableIdempotencyStore.complete\n", NAME(c)); goto mirror
      :: else -> printf("[%c] completeClaim(): DurableIdempotencyStore.complete refused ('lost'); the response stands\n", NAME(c)); answerFresh(c, t, out)
      fi
    }
releaseRow:
    /* releaseClaim() → freeKey() → DurableIdempotencyStore.release */
    atomic {
      if
      :: ROW_OWNED_FOR_RELEASE(t) -> ROW_FENCE(t); row.state = ABSENT; row.owner = 0; row.live = false; row.out = O_NONE
      :: else -> skip
      fi;
      printf("[%c] freeKey(): DurableIdempotencyStore.release\n", NAME(c))
    }
    /* freeKey() → IdempotencyStore.release */
    atomic { fastCallRelease(t); printf("[%c] freeKey(): IdempotencyStore.release\n", NAME(c)); answerFresh(c, t, out) }
  } unless {
    atomic { crash[c] -> printf("[%c] the worker dies\n", NAME(c)); retryLater(c, t) }
  };
finished:
  skip
}

/* DurableIdempotencyStore.extend, as the heartbeat of token w calls it: outside a transaction
   (inside one the renewal is part of it, invisible until COMMIT) */
#define ROW_RENEW(w) \
  :: atomic { tokSt[w] == T_HB && lockBy != w && row.state == IN_PROGRESS && !row.live && KEEP(row.owner == w) /* guard:durable-extend-owner */ -> \
       ROW_FENCE(w); row.live = true; printf("      heartbeat of token %d: DurableIdempotencyStore.extend renews the row's lease\n", w) }

/* The durable tier's refusal of a renewal is decisive (leaseRenewals()): the claim is lost and
   its whole heartbeat stops; a refusal by the fast tier only ends the fast renewals, which could
   not succeed again anyway (a token never owns a record again once it lost it). */
#define ROW_REFUSED(w) \
  :: atomic { tokSt[w] == T_HB && lockBy != w && !(row.state == IN_PROGRESS && row.owner == w) -> tokSt[w] = T_RUN; \
       printf("      heartbeat of token %d: DurableIdempotencyStore.extend refused: the claim is lost, the heartbeat stops\n", w) }

proctype Clock() {
end:
  do
  CLOCK_LAPSE_FAST
  /* the row's lease lapses when nobody renews it, or when its owner's renewals go into the
     owner's open transaction (a handler that runs longer than the lease) */
  :: atomic { row.state == IN_PROGRESS && row.live && (tokSt[row.owner] == T_GONE || lockBy == row.owner) -> row.live = false;
       printf("      the row's committed lease of token %d lapses\n", row.owner) }
  /* the database ends the transaction of a session whose process died */
  :: atomic { lockBy != 0 && tokSt[lockBy] == T_GONE -> printf("      the database rolls back the dead transaction of token %d\n", lockBy); txRollback() }
  RENEW_ALL(FAST_RENEW)
  RENEW_ALL(ROW_RENEW)
  RENEW_ALL(ROW_REFUSED)
  od
}

proctype Chaos() {
end:
  do
  CHAOS_LOSE_FAST
  CHAOS_FREEZE_FAST
  :: atomic { MAY(FREEZE) && row.state == IN_PROGRESS && row.live && tokSt[row.owner] != T_GONE ->
       events++; printf("      token %d freezes past its lease\n", row.owner); FREEZE_OWNER(row.owner) }
  EACH_REQUESTER(CHAOS_CRASH, )
  :: atomic { chaosOn -> chaosOn = false }  /* no more faults: fairness then asks nothing of Chaos */
  od
}

#define EFFECT_IFF_COMPLETED ((committed >= 1) == (row.state == COMPLETED && SUCCESS(row.out)))
#define FAST_MIRRORS_ROW (fast.state != COMPLETED || (row.state == COMPLETED && row.out == fast.out))

/* State invariants, checked in every state (the process runs only when one is broken). */
active proctype Monitor() {
  atomic {
    !(EFFECT_IFF_COMPLETED && FAST_MIRRORS_ROW) ->
    CHECK(commit_iff_completed, EFFECT_IFF_COMPLETED);
    CHECK(outcome_from_handler, FAST_MIRRORS_ROW)
  }
}

init {
  atomic { run Clock(); run Chaos(); START_REQUESTS }
}

#define STUCK ((fast.state == IN_PROGRESS && tokSt[fast.owner] == T_GONE) || \
               (row.state == IN_PROGRESS && tokSt[row.owner] == T_GONE) || \
               (lockBy != 0 && tokSt[lockBy] == T_GONE))
ltl every_request_answered { <> CLIENTS_DONE }
ltl no_stuck_key { [] (STUCK -> <> !STUCK) }
/* Not a property: its violation shows that a key does get stuck with a dead owner, so that
   no_stuck_key is not vacuously true. */
ltl stuck_reachable { [] !STUCK }
