/*
 * Model 3: a route on the fast tier alone (`@Idempotent()` without `durable`): Redis holds the
 * only record, and the handler's business write commits on its own, before the record completes.
 *
 * What holds with every fault on: fencing, no false success, outcome from the handler, and
 * progress. What does not, and is checked as an expected counter-example by model/verify.mjs
 * (-DCHECK_AT_MOST_ONCE): at most one effect per key (and with it one answer per key) fails
 * once Redis loses the record (event REDIS), a worker dies between its business write and
 * `complete` (CRASH), or an owner freezes past its lease and is taken over while its
 * handler still runs (FREEZE). With none of the three it holds.
 */

/* The fast tier is the authority here: its fencing is the one checked. */
#define FAST_FENCE(t) CHECK(fencing, !superseded[t])
#define FAST_COMPLETED_WITH(t, v) CHECK(outcome_from_handler, v == handlerOut[t])
#define FAST_SUPERSEDE(old, new) if :: old != 0 && old != new -> superseded[old] = true :: else -> skip fi
#define FAST_LOST(owner) if :: fast.state == IN_PROGRESS -> superseded[owner] = true :: else -> skip fi
#define FREEZE_OWNER(w) fast.live = false
#define MODEL_REFS(i) (true)
#define ENDATTEMPT_MODEL(c) skip
#ifndef CHECK_AT_MOST_ONCE
#define ONE_ANSWER_UNCHECKED
#endif

#include "common.pml"

#ifdef CHECK_AT_MOST_ONCE
#define EFFECT_COMMITS committed++; CHECK(at_most_one_effect, committed <= 1)
#else
#define EFFECT_COMMITS if :: committed < 2 -> committed++ :: else -> skip fi
#endif

proctype Request(byte c) {
  byte t, out;
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
         fastCreate(t); tokSt[t] = T_HB; printf("[%c]   claimed; hold(): heartbeat on\n", NAME(c)); goto execute
      :: fast.state == COMPLETED ->
         out = fast.out; printf("[%c]   completed: replayOf(), told (replay): ", NAME(c)); sayOutcome(out); toldSuccess(out); answerFinal(c, t, out)
      :: fast.state == IN_PROGRESS && KEEP(fast.live) /* guard:takeover-lease */ ->
         printf("[%c]   in progress, lease live: told 409\n", NAME(c)); retryLater(c, t)
      :: fast.state == IN_PROGRESS && KEEP(!fast.live) /* guard:takeover-lease */ ->
         seenFast[c] = fast.owner; printf("[%c]   in progress, lease of token %d lapsed\n", NAME(c), fast.owner); goto recover
      fi
    }
recover:
    /* recoverDeadLease() → IdempotencyStore.takeOver (TAKE_OVER_SCRIPT); staleLock 'takeover' → hold() */
    atomic {
      printf("[%c] recoverDeadLease(): IdempotencyStore.takeOver\n", NAME(c));
      if
      :: fast.state == ABSENT ->
         fastCreate(t); tokSt[t] = T_HB; printf("[%c]   absent: claimed\n", NAME(c)); goto execute
      :: fast.state == IN_PROGRESS && KEEP(fast.owner == seenFast[c]) /* guard:takeover-owner */ && KEEP(!fast.live) /* guard:takeover-lease */ ->
         fastTake(t); tokSt[t] = T_HB; printf("[%c]   taken over; hold(): heartbeat on\n", NAME(c)); goto execute
      :: else ->
         if /* judge(afterTakeover) */
         :: fast.state == COMPLETED -> out = fast.out; printf("[%c]   completed: told (replay): ", NAME(c)); sayOutcome(out); toldSuccess(out); answerFinal(c, t, out)
         :: else -> printf("[%c]   told 409\n", NAME(c)); retryLater(c, t)
         fi
      fi
    }
execute:
    /* The interceptor, once the claim is won: responseAnswered() → abandon() → IdempotencyStore.release.
       An outer layer answered, or the client left, while begin() was pending (a wait, a slow store):
       the handler does not run for an answer already given; the client retries. */
    if
    :: atomic {
         MAY(OUTER) -> events++; tokSt[t] = T_RUN;
         printf("[%c] the response was answered before the claim was won: abandon(), the handler does not run\n", NAME(c));
         fastCallRelease(t); retryLater(c, t)
       }
    :: skip
    fi;
#ifdef PRE_EVENTS_PENDING_ANSWER
    /* The engine before issue 22: the handler ran for a request already answered (408 while begin()
       was pending), and the record took that 408 as its status, which the policy releases. */
    if
    :: atomic {
         MAY(OUTER) -> events++; out = O_OK; EFFECT_COMMITS; handlerOut[t] = out; tokSt[t] = T_RUN; fastRelease(t);
         printf("[%c] (pre-22) answered 408 while the claim was pending; the handler runs, the 408 releases the key\n", NAME(c));
         retryLater(c, t)
       }
    :: skip
    fi;
#endif
#ifdef PRE_17A_OUTER
    /* The engine before rule 17a: an outer layer's early answer (408) settled the claim. */
    if
    :: atomic {
         MAY(OUTER) -> events++; tokSt[t] = T_RUN; fastRelease(t);
         printf("[%c] (pre-17a) an outer layer answers 408 first: IdempotencyStore.release while the handler runs\n", NAME(c))
       }
       atomic { out = O_OK; printf("[%c] the handler's write commits; the client got the 408\n", NAME(c)); EFFECT_COMMITS; handlerOut[t] = out; retryLater(c, t) }
    :: skip
    fi;
#endif
    /* execute() → Execution.run: the handler; its own write commits in the business database */
    atomic {
      if
      :: out = O_OK; printf("[%c] handler: success, its write commits\n", NAME(c)); EFFECT_COMMITS
      :: out = O_FAIL; printf("[%c] handler: a failure the policy stores (402)\n", NAME(c))
      :: MAY(TRANSIENT) -> events++; out = O_TRANSIENT; printf("[%c] handler: 5xx\n", NAME(c))
      fi;
      handlerOut[t] = out
    }
    /* settle() → finish(), retried by whileLeaseHeld(): decideOutcome() on the handler's own outcome;
       a failed call is retried while the heartbeat keeps the lease (the engine's estimate of it may be
       wrong: fencing decides), or given up (logged, counted), and the lease lapses; drop() then ends
       the heartbeat. Then the client gets the handler's response, unless an outer layer answered or it left. */
settle:
    atomic {
      if
      :: REDIS_CALL_FAILS -> events++;
         if
         :: printf("[%c] settle(): the Redis call fails; retried, the heartbeat keeps the lease\n", NAME(c)); goto settle
         :: tokSt[t] = T_RUN; printf("[%c] settle(): the Redis call fails; given up (logged, counted), the lease will lapse\n", NAME(c))
         fi
#ifdef PRE_17A_DISCONNECT
      :: out != O_OK && MAY(OUTER) ->
         /* the client left before the error was rendered: the engine stored the status it saw (200, no body) */
         events++; tokSt[t] = T_RUN; fastComplete(t, O_NO_BODY, ok); ok = 0;
         printf("[%c] (pre-17a) the client left: IdempotencyStore.complete with 200, no body\n", NAME(c)); retryLater(c, t)
#endif
      :: out == O_TRANSIENT -> tokSt[t] = T_RUN; fastRelease(t); printf("[%c] releaseClaim() → IdempotencyStore.release\n", NAME(c))
      :: out != O_TRANSIENT -> tokSt[t] = T_RUN; fastComplete(t, out, ok); printf("[%c] completeClaim() → IdempotencyStore.complete: ", NAME(c)); sayStoreAnswer(ok); ok = 0
      fi;
      if
      :: MAY(OUTER) -> events++; printf("[%c] an outer layer answers, or the client leaves: no final answer\n", NAME(c)); retryLater(c, t)
      :: out == O_TRANSIENT -> printf("[%c] told 5xx\n", NAME(c)); retryLater(c, t)
      :: out != O_TRANSIENT -> printf("[%c] told (fresh): ", NAME(c)); sayOutcome(out); toldSuccess(out); answerFinal(c, t, out)
      fi
    }
  } unless {
    atomic { crash[c] -> printf("[%c] the worker dies\n", NAME(c)); retryLater(c, t) }
  };
finished:
  skip
}

/* A refused renewal loses the claim (the fast tier is decisive here): the heartbeat stops. */
#define FAST_REFUSED(w) \
  :: atomic { tokSt[w] == T_HB && !(fast.state == IN_PROGRESS && fast.owner == w) -> tokSt[w] = T_RUN; \
       printf("      heartbeat of token %d: IdempotencyStore.extend refused: the claim is lost, the heartbeat stops\n", w) }

proctype Clock() {
end:
  do
  CLOCK_LAPSE_FAST
  RENEW_ALL(FAST_RENEW)
  RENEW_ALL(FAST_REFUSED)
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

/* State invariants, checked in every state (the process runs only when one is broken). */
active proctype Monitor() {
  atomic {
    !(!(fast.state == COMPLETED && SUCCESS(fast.out)) || committed >= 1) ->
    CHECK(no_false_success, !(fast.state == COMPLETED && SUCCESS(fast.out)) || committed >= 1)
  }
}

init {
  atomic { run Clock(); run Chaos(); START_REQUESTS }
}

#define STUCK (fast.state == IN_PROGRESS && tokSt[fast.owner] == T_GONE)
ltl every_request_answered { <> CLIENTS_DONE }
ltl no_stuck_key { [] (STUCK -> <> !STUCK) }
/* Not a property: its violation shows that a key does get stuck with a dead owner, so that
   no_stuck_key is not vacuously true. */
ltl stuck_reachable { [] !STUCK }
