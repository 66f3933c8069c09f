/*
 * Model 2: a durable, transactional route with the protocol change approved in issue 14 (item 3):
 * the durable claim is the business transaction's first statement.
 *
 * begin(): the fast claim (Redis), then BEGIN; INSERT the in_progress row (ON CONFLICT DO
 * NOTHING) in confirmDurable() → DurableIdempotencyStore.claimInTransaction; execute() runs the
 * handler in that transaction. Nothing happens between the two in the model's terms (the open
 * transaction is carried by the claim), so they are one step here. A duplicate's INSERT waits for the uncommitted row of the first
 * (PostgreSQL's unique index), up to lock_timeout, then answers 409; after a COMMIT it sees the
 * completed row and replays it; after a ROLLBACK it inserts and runs. The handler's writes, and
 * the completion of the row, are in the same transaction: one COMMIT. A stored failure (402)
 * rolls the handler's writes back to a SAVEPOINT taken after the INSERT and completes the row in
 * the same transaction. A durable row is therefore never committed in progress on such a route.
 *
 * The function names below are those of the implementation (libs/idempotency/src/engine,
 * typeorm): begin → decide, IdempotencyStore.claim, judge, committedAnswer, recoverThroughDurable,
 * takeOver, confirmDurable → DurableIdempotencyStore.claimInTransaction (the INSERT as the first
 * statement), IdempotencyTransaction.executeInClaimTransaction (DurableClaimTransaction.savepoint,
 * Execution.run, DurableClaimTransaction.complete and .commit), mirrorCompletion,
 * answerFromDurable, ClaimSettlement.abandon → freeKey.
 *
 * The heartbeat renews the Redis lease (LiveClaims.leaseRenewals: not decisive); the durable
 * "lease" is the open transaction itself, which the heartbeat does not renew (a claim with
 * durableInTransaction has no durable renewal at all, so nothing can count as a refusal). A worker that dies takes its transaction with it:
 * the database rolls it back once it notices the dead session (process Clock).
 */

#define FAST_FENCE(t) skip
#define FAST_COMPLETED_WITH(t, v) CHECK(outcome_from_handler, row.state == COMPLETED && row.out == v)
#define FAST_SUPERSEDE(old, new) skip
#define FAST_LOST(owner) skip
#define FREEZE_OWNER(w) fast.live = false
#define MODEL_REFS(i) (row.owner != i && ins[i] == ABSENT)
#define ENDATTEMPT_MODEL(c) skip

#include "common.pml"

Record row;                       /* the durable row, as committed */
byte ins[NTOK + 1];               /* the row as token i's open transaction wrote it (ABSENT: no open transaction) */
byte insOut[NTOK + 1];            /* the outcome that transaction completed the row with (uncommitted) */
bool txEff[NTOK + 1];             /* that transaction holds the business effect (uncommitted) */

/* Another transaction holds an uncommitted INSERT of the key: ours waits on it (unique index). */
#define INSERTED_BY_OTHER(i) (ins[i] != ABSENT && t != i)
#define OTHER_INSERT(t) (EACH_TOKEN(INSERTED_BY_OTHER, OR))

/* Nothing ever takes a durable claim over on this route: fencing of the row is structural. */
#define ROW_FENCE(t) CHECK(fencing, !superseded[t])
bool row_never_in_progress = true; /* a durable row is never committed in progress on this route */

inline txRollback(t) {
  ins[t] = ABSENT; insOut[t] = O_NONE; txEff[t] = false
}

/* COMMIT of t's transaction: its effect and its completed row become visible together. */
inline txCommit(t) {
  committed = committed + txEff[t];
  CHECK(at_most_one_effect, committed <= 1);
  ROW_FENCE(t);
  row.state = COMPLETED; row.owner = t; row.live = false; row.out = insOut[t];
  txRollback(t)
}

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
  bool answered;
  bool conflict;  /* the COMMIT failed with a serialization failure: PostgreSQL rolled the transaction back */
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
      :: fast.state == ABSENT ->
         fastCreate(t); tokSt[t] = T_HB; printf("[%c]   claimed; hold(): heartbeat on (the durable claim comes with the transaction)\n", NAME(c)); goto transaction
      :: fast.state == COMPLETED -> out = fast.out; replay(c, t, out)
      :: fast.state == IN_PROGRESS && fast.live ->
         seenFast[c] = fast.owner; printf("[%c]   in progress, lease live\n", NAME(c)); goto committedAnswer
      :: fast.state == IN_PROGRESS && !fast.live ->
         seenFast[c] = fast.owner; printf("[%c]   in progress, lease of token %d lapsed\n", NAME(c), fast.owner); goto recoverFast
      fi
    }
committedAnswer:
    /* committedAnswer() → DurableIdempotencyStore.get (reads committed rows only) */
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
    /* recoverThroughDurable() → IdempotencyStore.takeOver (TAKE_OVER_SCRIPT); the durable row decides in the transaction */
    atomic {
      printf("[%c] recoverThroughDurable(): IdempotencyStore.takeOver\n", NAME(c));
      if
      :: fast.state == ABSENT -> seenFast[c] = 0; fastCreate(t); tokSt[t] = T_HB; goto transaction
      :: fast.state == IN_PROGRESS && KEEP(fast.owner == seenFast[c]) /* guard:takeover-owner */ && KEEP(!fast.live) /* guard:takeover-lease */ ->
         seenFast[c] = 0; fastTake(t); tokSt[t] = T_HB; printf("[%c]   taken over; hold(): heartbeat on\n", NAME(c)); goto transaction
      :: else ->
         seenFast[c] = 0;
         if /* judge(afterTakeover) */
         :: fast.state == COMPLETED -> out = fast.out; replay(c, t, out)
         :: else -> printf("[%c]   told 409\n", NAME(c)); retryLater(c, t)
         fi
      fi
    }
transaction:
    /* confirmDurable() → DurableIdempotencyStore.claimInTransaction: BEGIN; INSERT … ON CONFLICT
       DO NOTHING RETURNING, the claim as the first statement: it waits for another transaction's
       uncommitted INSERT of the key, up to lock_timeout. Then executeInClaimTransaction():
       DurableClaimTransaction.savepoint(), Execution.run(manager), the handler, and on a kept
       outcome DurableClaimTransaction.complete(response): private to the transaction until
       COMMIT, so one step here. (PostgreSQL sends BEGIN, the INSERT and the SAVEPOINT in one
       round trip, and the completion with the COMMIT in another: the same steps, fewer waits.) */
    if
    :: atomic {
         KEEP(!OTHER_INSERT(t)) /* guard:insert-waits */ ->
         printf("[%c] DurableIdempotencyStore.claimInTransaction: BEGIN; INSERT the claim\n", NAME(c));
         if
         :: row.state == ABSENT -> ins[t] = IN_PROGRESS; printf("[%c]   inserted (uncommitted)\n", NAME(c))
         :: row.state == COMPLETED -> out = row.out; printf("[%c]   conflict: the row is completed; ROLLBACK\n", NAME(c)); goto answerRepair
         :: row.state == IN_PROGRESS -> CHECK(row_never_in_progress, false)
         fi;
         if
         :: MAY(OUTER) ->
            /* the interceptor: responseAnswered() → abandon(): an outer layer answered, or the client
               left, while begin() was pending; ROLLBACK takes the uncommitted claim, the handler does not run */
            events++; txRollback(t); tokSt[t] = T_RUN;
            printf("[%c] the response was answered before the claim was won: abandon(), ROLLBACK, the handler does not run\n", NAME(c));
            goto abandoned
         :: out = O_OK; printf("[%c] handler: success (its write, uncommitted)\n", NAME(c))
         :: out = O_FAIL; printf("[%c] handler: wrote, then failed with a status the policy stores (402)\n", NAME(c))
         :: MAY(TRANSIENT) -> events++; out = O_TRANSIENT; printf("[%c] handler: wrote, then failed with a 5xx\n", NAME(c))
         fi;
         txEff[t] = true;
         handlerOut[t] = out;
         if
         :: KEEP(out == O_OK) /* guard:rollback-on-failure */ -> skip
#ifdef STORE_FAILURE_AFTER_ROLLBACK
         :: out == O_FAIL -> txRollback(t); tokSt[t] = T_RUN; printf("[%c] ROLLBACK (the whole transaction)\n", NAME(c)); goto storeFailure
#else
         :: out == O_FAIL -> txEff[t] = false; printf("[%c] ROLLBACK TO SAVEPOINT: the handler's writes are undone, the claim stays\n", NAME(c))
#endif
         :: out == O_TRANSIENT -> txRollback(t); tokSt[t] = T_RUN; printf("[%c] ROLLBACK; freeKey()\n", NAME(c)); goto releaseFast
         fi;
         /* DurableClaimTransaction.complete(response): UPDATE … WHERE owner_token AND in_progress sees the transaction's own row */
         if
         :: KEEP(ins[t] == IN_PROGRESS) /* guard:durable-complete-owner */ ->
            CHECK(outcome_from_handler, out == handlerOut[t]); insOut[t] = out; ins[t] = COMPLETED;
            printf("[%c] DurableClaimTransaction.complete in the transaction\n", NAME(c))
         :: else -> printf("[%c]   IdempotencyClaimLostError: rolled back, told 409\n", NAME(c)); txRollback(t); tokSt[t] = T_RUN; retryLater(c, t)
         fi;
         goto commit
       }
    :: atomic { OTHER_INSERT(t) -> printf("[%c] DurableIdempotencyStore.claimInTransaction: the INSERT waits; lock_timeout: ROLLBACK, busy\n", NAME(c)); goto answerRelease }
    fi;
commit:
    /* executeInClaimTransaction() → DurableClaimTransaction.commit(): COMMIT; then drop() ends the heartbeat */
    atomic {
      if
      :: printf("[%c] COMMIT\n", NAME(c)); txCommit(t); answered = true
      :: MAY(UNKNOWN) -> events++; printf("[%c] COMMIT applied, its reply lost\n", NAME(c)); txCommit(t); answered = false
      :: MAY(UNKNOWN) -> events++; txRollback(t); answered = false; printf("[%c] COMMIT fails\n", NAME(c))
      :: MAY(UNKNOWN) -> events++; txRollback(t); answered = false; conflict = true;
         printf("[%c] COMMIT fails with a serialization failure or deadlock (40001, 40P01): rolled back\n", NAME(c))
      fi;
      tokSt[t] = T_RUN;
      if
      :: KEEP(answered) /* guard:commit-answered */ -> answered = false
      /* IdempotencyTransaction.isConflict(): DurableIdempotencyStore.isSerializationFailure(error) says
         nothing committed, so the claim is abandoned at once (503, Retry-After: 1), never kept as an
         unknown outcome. A 40001 raised by the handler's own statement is a handler failure the
         policy releases (O_TRANSIENT above), answered the same way. */
      :: conflict -> conflict = false; fastCallRelease(t);
         printf("[%c]   a definite rollback: freeKey(), told 503 with Retry-After: 1\n", NAME(c)); retryLater(c, t)
      :: else -> printf("[%c]   'replaced' (store-unavailable): told 503, the Redis claim is kept until its lease lapses\n", NAME(c)); retryLater(c, t)
      fi
    }
mirror:
    /* mirrorCompletion() → IdempotencyStore.complete(id, ownerToken, stored) */
    atomic {
      fastCallComplete(t, out, ok); printf("[%c] mirrorCompletion(): IdempotencyStore.complete: ", NAME(c)); sayStoreAnswer(ok);
      if
      :: ok == 0 -> goto restore
      :: ok == 2 -> ok = 0; printf("[%c]   whileLeaseHeld(): retried\n", NAME(c)); goto mirror
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
#ifdef STORE_FAILURE_AFTER_ROLLBACK
storeFailure:
    /* a mutant: the stored failure is written after the whole transaction rolled back, as its own
       INSERT of a completed row (ON CONFLICT DO NOTHING) */
    atomic {
      if
      :: row.state == ABSENT && !OTHER_INSERT(t) ->
         row.state = COMPLETED; row.owner = t; row.live = false; row.out = out; printf("[%c] INSERT the completed 402 row\n", NAME(c)); goto mirror
      :: else -> printf("[%c] the completed 402 row conflicts ('lost'); the response stands\n", NAME(c)); answerFresh(c, t, out)
      fi
    }
#endif
answerRepair:
    /* answerFromDurable() → IdempotencyStore.complete(id, fastOwnerToken, row.response) */
    atomic { tokSt[t] = T_RUN; fastCallComplete(t, out, ok); printf("[%c] answerFromDurable(): IdempotencyStore.complete (repair): ", NAME(c)); sayStoreAnswer(ok); ok = 0; replay(c, t, out) }
answerRelease:
    /* confirmDurable(), claimInTransaction answered busy → IdempotencyStore.release(id, fastOwnerToken); 409 */
    atomic { tokSt[t] = T_RUN; fastCallRelease(t); printf("[%c] IdempotencyStore.release; told 409\n", NAME(c)); retryLater(c, t) }
releaseFast:
    /* DurableClaimTransaction.rollback(); ClaimSettlement.abandon() → freeKey() → releaseFastFollower():
       IdempotencyStore.release (the transaction took the durable claim with it), retried while the lease is held */
    atomic {
      if
      :: REDIS_CALL_FAILS -> events++; printf("[%c] freeKey(): IdempotencyStore.release fails; retried\n", NAME(c)); goto releaseFast
      :: REDIS_CALL_FAILS -> events++; printf("[%c] freeKey(): IdempotencyStore.release fails; given up, the lease lapses\n", NAME(c))
      :: true -> fastRelease(t); printf("[%c] freeKey(): IdempotencyStore.release\n", NAME(c))
      fi;
      answerFresh(c, t, out)
    }
abandoned:
    /* abandon() → freeKey() → IdempotencyStore.release; the client, answered already, retries */
    atomic { fastCallRelease(t); printf("[%c] abandon(): IdempotencyStore.release\n", NAME(c)); retryLater(c, t) }
  } unless {
    atomic { crash[c] -> printf("[%c] the worker dies\n", NAME(c)); retryLater(c, t) }
  };
finished:
  skip
}

/* The database ends the transaction of a session whose process died. */
#define DEAD_TX_ROLLBACK(i) \
  :: atomic { ins[i] != ABSENT && tokSt[i] == T_GONE -> printf("      the database rolls back the dead transaction of token %d\n", i); txRollback(i) }

/* The fast tier is not decisive on a durable route: a refused fast renewal changes nothing that
   matters (a token never owns a record again once it lost it). */

proctype Clock() {
end:
  do
  CLOCK_LAPSE_FAST
  RENEW_ALL(FAST_RENEW)
  EACH_TOKEN(DEAD_TX_ROLLBACK, )
  od
}

proctype Chaos() {
end:
  do
  CHAOS_LOSE_FAST
  CHAOS_FREEZE_FAST
  EACH_REQUESTER(CHAOS_CRASH, )
  :: atomic { chaosOn -> chaosOn = false }  /* no more faults: fairness then asks nothing of Chaos */
  od
}

#define EFFECT_IFF_COMPLETED ((committed >= 1) == (row.state == COMPLETED && SUCCESS(row.out)))
#define FAST_MIRRORS_ROW (fast.state != COMPLETED || (row.state == COMPLETED && row.out == fast.out))

active proctype Monitor() {
  atomic {
    !(EFFECT_IFF_COMPLETED && FAST_MIRRORS_ROW && row.state != IN_PROGRESS) ->
    CHECK(commit_iff_completed, EFFECT_IFF_COMPLETED);
    CHECK(outcome_from_handler, FAST_MIRRORS_ROW);
    CHECK(row_never_in_progress, row.state != IN_PROGRESS)
  }
}

init {
  atomic { run Clock(); run Chaos(); START_REQUESTS }
}

#define OPEN_DEAD_TX(i) (ins[i] != ABSENT && tokSt[i] == T_GONE)
#define STUCK ((fast.state == IN_PROGRESS && tokSt[fast.owner] == T_GONE) || EACH_TOKEN(OPEN_DEAD_TX, OR))
ltl every_request_answered { <> CLIENTS_DONE }
ltl no_stuck_key { [] (STUCK -> <> !STUCK) }
/* Not a property: its violation shows that a key does get stuck with a dead owner, so that
   no_stuck_key is not vacuously true. */
ltl stuck_reachable { [] !STUCK }
