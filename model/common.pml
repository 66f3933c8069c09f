/*
 * Shared definitions of the protocol models (docs/protocol-model.md explains them).
 *
 * One scoped key. Its fast-tier record lives in Redis (IdempotencyStore; the Lua scripts of
 * redis/redis-scripts.ts); on durable routes its row lives in PostgreSQL (DurableIdempotencyStore;
 * TypeOrmIdempotencyStore, its SQL in typeorm/idempotency-records.sql.ts, its transactions in
 * typeorm/idempotency-records.connection.ts). Paths are under libs/idempotency/src. Requests come from CLIENTS processes that retry until
 * they get a final answer, then a PROBER: a later request with the same key, sent again and
 * again (so a key left in progress with nobody to finish it would be seen).
 *
 * Time is abstract: a lease is "live" or "lapsed". A lease lapses on its own (process Clock)
 * once nobody renews it; a running owner's lease lapses only when it freezes (process Chaos,
 * event FREEZE) and comes back when its heartbeat resumes.
 *
 * Each step of a request is one atomic call of the store it names (one Lua script, one SQL
 * statement, one COMMIT), with a comment naming the function that implements it.
 *
 * A guard written KEEP(x) followed by the comment "guard:NAME" is one that model/verify.mjs
 * removes (x becomes true), one at a time, in the mutants it expects to fail.
 */

#define KEEP(x) (x)

#ifndef CLIENTS
#define CLIENTS 2
#endif
#define PROBER CLIENTS            /* the process id of the later request */
#define REQUESTERS (CLIENTS + 1)
#ifndef NTOK
#define NTOK 5                    /* owner tokens; recycled once nothing refers to them */
#endif

/*
 * Adversity. Every fault and odd outcome below is an "event"; a run has at most MAX_EVENTS of
 * them, of any kinds (so every pair of kinds, and every kind twice, is checked together).
 * -DNO_<KIND> switches a kind off.
 *   REDIS      Redis loses the record (eviction, failover, FLUSHALL), or a call to it fails
 *   FREEZE     an owner freezes past its lease (GC pause, partition) and resumes as a zombie
 *   CRASH      a worker dies at any step; its client sees the connection drop and retries
 *   UNKNOWN    a COMMIT whose reply is lost: it may or may not have happened
 *   OUTER      an outer layer answers first (408/504) or turns the answer into a 500, or the
 *              client leaves: the client gets no final answer and retries
 *   TRANSIENT  the handler fails with a 5xx (the policy releases the key; the client retries)
 */
#ifndef MAX_EVENTS
#define MAX_EVENTS 2
#endif
#ifdef NO_REDIS
#define ON_REDIS false
#else
#define ON_REDIS true
#endif
#ifdef NO_FREEZE
#define ON_FREEZE false
#else
#define ON_FREEZE true
#endif
#ifdef NO_CRASH
#define ON_CRASH false
#else
#define ON_CRASH true
#endif
#ifdef NO_UNKNOWN
#define ON_UNKNOWN false
#else
#define ON_UNKNOWN true
#endif
#ifdef NO_OUTER
#define ON_OUTER false
#else
#define ON_OUTER true
#endif
#ifdef NO_TRANSIENT
#define ON_TRANSIENT false
#else
#define ON_TRANSIENT true
#endif
/* An event of a kind may happen now (the Chaos process retires by clearing chaosOn). */
#define MAY(kind) (ON_##kind && events < MAX_EVENTS && chaosOn)

/* Record states (IdempotencyRecordState; ABSENT: no record, or an expired one). A completed
   record keeps no lease (live = false), and a completed Redis record no owner (owner = 0): no
   script reads them any more. */
#define ABSENT 0
#define IN_PROGRESS 1
#define COMPLETED 2

/* What a handler produced (its own settlement, CONTRACT B.7 rule 17a). */
#define O_NONE 0
#define O_OK 1          /* 2xx: its business write commits */
#define O_FAIL 2        /* a failure the policy stores (e.g. 402): nothing of it commits */
#define O_TRANSIENT 3   /* a failure the policy releases (5xx): nothing of it commits */
#define O_NO_BODY 4     /* "completed, no body": only what a mutant engine stores when no handler produced it */
#define SUCCESS(o) ((o) == O_OK || (o) == O_NO_BODY)

/* The life of an owner token (newOwnerToken(): one per attempt). */
#define T_FREE 0        /* unused: nothing refers to it */
#define T_RUN 1         /* its attempt runs without a heartbeat (in begin(), or after drop()) */
#define T_HB 2          /* a held claim: IdempotencyClaim's heartbeat renews its leases */
#define T_GONE 3        /* its attempt is over (answered, crashed, or left the claim to lapse) */

typedef Record { byte state; byte owner; bool live; byte out }

Record fast;                      /* the Redis record of the key */

byte tokSt[NTOK + 1];
byte handlerOut[NTOK + 1];        /* ghost: what the handler of the attempt with this token produced */
bool superseded[NTOK + 1];        /* ghost: the authoritative record went to another claim while it was this one's */
byte seenFast[REQUESTERS];        /* the fast owner token a request read (judge() → takeOver's expected token) */

bool busy[REQUESTERS];            /* an attempt is running */
bool crash[REQUESTERS];           /* Chaos killed the worker of that attempt */
bool done[REQUESTERS];            /* got a final answer */

byte ti;                          /* loop index of the token scans (0 between steps) */
byte ok;                          /* a store call's answer, read in the same atomic step (0 between steps) */

byte events;                      /* events so far */
bool chaosOn = true;

byte committed;                   /* business effects committed */
byte firstAnswer;                 /* the first final answer any client got (O_OK or O_FAIL) */

/* The properties, as ghost flags: an assertion names the one that failed. */
bool at_most_one_effect = true;   /* at most one committed business effect per key */
bool no_false_success = true;     /* success is recorded or told only when an effect committed */
bool outcome_from_handler = true; /* a record completes only with its owner's handler outcome (or, on the fast tier of a durable route, the committed row's) */
bool commit_iff_completed = true; /* transactional: an effect committed exactly when the record completed with success */
bool fencing = true;              /* a claim whose record was taken over changes nothing */
bool one_answer = true;           /* every final answer for the key is the same outcome */
bool model_bounds = true;         /* the model's own bounds held (owner tokens sufficed) */

#define CHECK(property, cond) if :: !(cond) -> property = false :: else -> skip fi; assert(property)

/* Narration of a counter-example: pan never prints, a replay (spin -t) does. Requests are
   A and B (concurrent, each retrying until it gets a final answer) and C (the later one). */
#define NAME(c) ('A' + c)

#if CLIENTS == 2
#define EACH_REQUESTER(R, J) R(0) J R(1) J R(2)
#define CLIENTS_DONE (done[0] && done[1])
#define START_REQUESTS run Request(0); run Request(1); run Request(PROBER)
#elif CLIENTS == 3
#define EACH_REQUESTER(R, J) R(0) J R(1) J R(2) J R(3)
#define CLIENTS_DONE (done[0] && done[1] && done[2])
#define START_REQUESTS run Request(0); run Request(1); run Request(2); run Request(PROBER)
#endif
#define AND &&
#define OR ||

/* A token is free when its attempt is over and no record, transaction or read still names it
   (ti: the token scanned). */
#define SEEN_FAST_NOT_TI(r) seenFast[r] != ti
#define TI_UNUSED (tokSt[ti] != T_RUN && tokSt[ti] != T_HB && fast.owner != ti && \
                   EACH_REQUESTER(SEEN_FAST_NOT_TI, AND) && MODEL_REFS(ti))

inline collectTokens() {
  d_step {
    for (ti : 1 .. NTOK) {
      if
      :: tokSt[ti] == T_GONE && TI_UNUSED -> tokSt[ti] = T_FREE; handlerOut[ti] = O_NONE; superseded[ti] = false
      :: else -> skip
      fi
    };
    ti = 0
  }
}

/* newOwnerToken(): the lowest token nothing refers to (fresh, as far as any record can tell). */
inline startAttempt(c, t) {
  collectTokens();
  d_step {
    t = 0;
    for (ti : 1 .. NTOK) {
      if
      :: t == 0 && tokSt[ti] == T_FREE -> t = ti
      :: else -> skip
      fi
    };
    ti = 0
  };
  CHECK(model_bounds, t != 0);
  tokSt[t] = T_RUN;
  busy[c] = true
}

/* Tails of an attempt, run inside the atomic step that decided them: the client's next request
   (a retry, or the prober's next one) starts at the label `again`; a client with a final answer
   stops at `finished`. */
inline retryLater(c, t) {
  endAttempt(c, t);
  goto again
}

inline answerFinal(c, t, o) {
  finalAnswer(o);
  done[c] = true;
  endAttempt(c, t);
  if
  :: c == PROBER -> goto again
  :: else -> goto finished
  fi
}

/* A client is told "completed" (a fresh success or a replayed one): an effect must have committed. */
inline toldSuccess(o) {
  if
  :: SUCCESS(o) -> CHECK(no_false_success, committed >= 1)
  :: else -> skip
  fi
}

inline endAttempt(c, t) {
  tokSt[t] = T_GONE;
  handlerOut[t] = O_NONE;         /* ghosts of an attempt that can write no more */
  superseded[t] = false;
  busy[c] = false;
  crash[c] = false;
  seenFast[c] = 0;
  ENDATTEMPT_MODEL(c);
  collectTokens();
  t = 0;
  out = O_NONE
}

inline sayOutcome(o) {
  if
  :: o == O_OK -> printf("success (2xx)\n")
  :: o == O_FAIL -> printf("the stored failure (402)\n")
  :: o == O_TRANSIENT -> printf("5xx\n")
  :: o == O_NO_BODY -> printf("completed, no body (200)\n")
  :: else -> printf("?\n")
  fi
}

inline sayStoreAnswer(ok) {
  if
  :: ok == 1 -> printf("done\n")
  :: ok == 0 -> printf("refused (not this claim's record)\n")
  :: else -> printf("the call failed\n")
  fi
}

/* A final answer: all of them must agree. */
#ifdef ONE_ANSWER_UNCHECKED
inline finalAnswer(o) { skip }
#else
inline finalAnswer(o) {
  if
  :: firstAnswer == O_NONE -> firstAnswer = o
  :: else -> CHECK(one_answer, firstAnswer == o || (SUCCESS(firstAnswer) && SUCCESS(o)))
  fi
}
#endif

/* ---- The fast tier: one inline per Lua script of redis/redis-scripts.ts -------------------- */

/* A Redis call may fail (timeout, reset; event REDIS): nothing is written. */
#define REDIS_CALL_FAILS MAY(REDIS)

/* CLAIM_SCRIPT / TAKE_OVER_SCRIPT on an absent key: a fresh in_progress record, lease live. */
inline fastCreate(t) {
  fast.state = IN_PROGRESS; fast.owner = t; fast.live = true; fast.out = O_NONE
}

/* TAKE_OVER_SCRIPT, the compare-and-set part: new owner (fencing + 1), lease live. */
inline fastTake(t) {
  FAST_SUPERSEDE(fast.owner, t);
  fast.owner = t; fast.live = true
}

/* COMPLETE_SCRIPT: only an in_progress record owned by t (owned_in_progress). */
#define FAST_OWNED_FOR_COMPLETE(t) (fast.state == IN_PROGRESS && KEEP(fast.owner == t) /* guard:fast-complete-owner */)
inline fastComplete(t, v, ok) {
  if
  :: FAST_OWNED_FOR_COMPLETE(t) ->
     FAST_FENCE(t); FAST_COMPLETED_WITH(t, v);
     FAST_SUPERSEDE(fast.owner, t);
     fast.state = COMPLETED; fast.owner = 0; fast.live = false; fast.out = v; ok = 1
  :: else -> ok = 0
  fi
}

/* An engine call of COMPLETE_SCRIPT; ok: 1 completed, 0 refused, 2 the call failed (event REDIS). */
inline fastCallComplete(t, v, ok) {
  if
  :: REDIS_CALL_FAILS -> events++; ok = 2; printf("      (the Redis call fails)\n")
  :: true -> fastComplete(t, v, ok)
  fi
}

/* RELEASE_SCRIPT: deletes an in_progress record owned by t. */
#define FAST_OWNED_FOR_RELEASE(t) (fast.state == IN_PROGRESS && KEEP(fast.owner == t) /* guard:fast-release-owner */)
inline fastRelease(t) {
  if
  :: FAST_OWNED_FOR_RELEASE(t) -> FAST_FENCE(t); FAST_SUPERSEDE(fast.owner, t); fast.state = ABSENT; fast.owner = 0; fast.live = false; fast.out = O_NONE
  :: else -> skip
  fi
}

inline fastCallRelease(t) {
  if
  :: REDIS_CALL_FAILS -> events++; printf("      (the Redis call fails)\n")
  :: true -> fastRelease(t)
  fi
}

/* RESTORE_SCRIPT: writes the completed record only where none exists. */
inline fastRestore(t, v) {
  if
  :: fast.state == ABSENT -> FAST_COMPLETED_WITH(t, v); fast.state = COMPLETED; fast.owner = 0; fast.live = false; fast.out = v
  :: else -> skip
  fi
}

/* EXTEND_SCRIPT, as the heartbeat of token w calls it (in Clock): renews a lapsed lease of its own record. */
#define FAST_RENEW(w) \
  :: atomic { tokSt[w] == T_HB && fast.state == IN_PROGRESS && !fast.live && KEEP(fast.owner == w) /* guard:fast-extend-owner */ -> \
       FAST_FENCE(w); FAST_SUPERSEDE(fast.owner, w); fast.live = true; printf("      heartbeat of token %d: IdempotencyStore.extend renews the Redis lease\n", w) }

/* Chaos: Redis loses the record. */
#define CHAOS_LOSE_FAST \
  :: atomic { MAY(REDIS) && fast.state != ABSENT -> \
       events++; FAST_LOST(fast.owner); fast.state = ABSENT; fast.owner = 0; fast.live = false; fast.out = O_NONE; \
       printf("      Redis loses the record (eviction, failover, FLUSHALL)\n") }

/* Chaos: the fast owner freezes; its leases lapse (FREEZE_OWNER: every tier it renews). */
#define CHAOS_FREEZE_FAST \
  :: atomic { MAY(FREEZE) && fast.state == IN_PROGRESS && fast.live && tokSt[fast.owner] != T_GONE -> \
       events++; printf("      token %d freezes past its lease\n", fast.owner); FREEZE_OWNER(fast.owner) }

/* Chaos: a worker dies. */
#define CHAOS_CRASH(c) \
  :: atomic { MAY(CRASH) && busy[c] && !crash[c] -> events++; crash[c] = true }

/* Clock: a lease nobody renews lapses. */
#define CLOCK_LAPSE_FAST \
  :: atomic { fast.state == IN_PROGRESS && fast.live && tokSt[fast.owner] == T_GONE -> fast.live = false; \
       printf("      the Redis lease of token %d lapses (nobody renews it)\n", fast.owner) }

#if NTOK == 5
#define EACH_TOKEN(R, J) R(1) J R(2) J R(3) J R(4) J R(5)
#elif NTOK == 7
#define EACH_TOKEN(R, J) R(1) J R(2) J R(3) J R(4) J R(5) J R(6) J R(7)
#endif
#define RENEW_ALL(R) EACH_TOKEN(R, )
