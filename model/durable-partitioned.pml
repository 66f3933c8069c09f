/*
 * Model 4: the claim of one scoped key on the partitioned durable table (opt-in
 * `partitioning: { partitionMs }` of the TypeORM store, docs/capacity.md "The partitioned table").
 *
 * PostgreSQL cannot put a unique index on "key" alone across RANGE partitions of created_at_ms,
 * so the claim is a protocol of its own:
 *   1. pg_advisory_xact_lock(hash of key): one claim of the key at a time, until its COMMIT or
 *      ROLLBACK (a route's business transaction, or the claim's own short one);
 *   2. look for a live row of the key in EVERY attached partition (each one a separate read,
 *      so that the reaper and the clock can move between them);
 *   3. none: delete the key's expired rows (the DELETE holds every attached partition, ROW
 *      EXCLUSIVE, until the transaction ends), then read the clock, insert the new row in the
 *      partition of that creation time (uncommitted until the transaction ends), commit, unlock.
 * The reaper detaches a past partition only after a SHARE lock (which waits for its writers)
 * shows no live row in it; an extended record keeps its old partition attached. The check and
 * the drop are two steps: DETACH ... CONCURRENTLY runs after the check's transaction, and waits
 * for the transactions that use the parent table (every claim from its first read on).
 *
 * Adversity: the clock moves to the next partition at any step, any live record may expire at
 * any step (or be extended: it simply does not expire yet), a claim may roll back.
 *
 * Property `mutual_exclusion`: a claim commits only while no other record of the key is live,
 * wherever its row is (a ghost count, which a dropped row does not decrement: its owner still
 * works under it). The mutants, each of which the checker must reject:
 *   - guard:partitioned-key-lock           no advisory lock: two claims both read "none";
 *   - -DCHECK_CURRENT_ONLY                 the read looks at the current partition only;
 *   - guard:partition-drop-live-check      the reaper drops by age, a live (extended) row with it;
 *   - guard:partition-drop-waits-writers   the reaper does not wait for an uncommitted insert;
 *   - -DCLOCK_BEFORE_LOCKS                 the claim reads the clock before the DELETE's lock
 *                                          waits: its row goes in a partition the reaper found empty.
 */
#define KEEP(x) (x)

#define NP 3          /* partitions 0..NP-1; the clock starts in 0 (Expiry and Reaper spell out each one) */
#define CLAIMERS 2
#define ATTEMPTS 2    /* each client claims, and may claim again once the record expired */

#define NONE 0
#define PENDING 1     /* inserted, not committed: invisible to other transactions */
#define LIVE 2
#define EXPIRED 3

byte rows[NP];                 /* the key's row in each partition (at most one each) */
bool attached[NP];
byte cur = 0;                  /* the partition of "now" */
byte lockHolder = 0;           /* 0: free; else the claimer's id + 1 */
byte ghostLive = 0;            /* records of the key committed and not yet expired */
byte inTx = 0;                 /* claims between their first read and their end: they use the parent table */
byte holding = 0;              /* claims past their DELETE: ROW EXCLUSIVE on every attached partition */
bool checked[NP];              /* the reaper found the partition droppable; its DETACH comes next */
bool mutual_exclusion = true;

proctype Claimer(byte me) {
  byte attempt = 0;
  byte p;
  byte target;
  bool found;
  do
  :: attempt < ATTEMPTS ->
     attempt++;
     /* 1. the per-key advisory lock (a mutant skips it) */
     atomic { KEEP(lockHolder == 0) /* guard:partitioned-key-lock */ -> if :: lockHolder == 0 -> lockHolder = me + 1 :: else -> skip fi }
     /* 2. read every attached partition, one at a time */
     inTx++;
#ifdef CLOCK_BEFORE_LOCKS
     target = cur;
#endif
     found = false;
     p = 0;
     do
     :: p < NP ->
#ifdef CHECK_CURRENT_ONLY
        atomic { if :: p == cur && attached[p] && rows[p] == LIVE -> found = true :: else -> skip fi; p++ }
#else
        atomic { if :: attached[p] && rows[p] == LIVE -> found = true :: else -> skip fi; p++ }
#endif
     :: else -> break
     od;
     if
     :: found -> printf("claimer %d: existing\n", me)
     :: else ->
        /* 3. remove the key's expired rows (holding every partition), insert in the partition of creation time */
        atomic {
          holding++;
          p = 0;
          do
          :: p < NP -> if :: rows[p] == EXPIRED -> rows[p] = NONE :: else -> skip fi; p++
          :: else -> break
          od
        }
#ifndef CLOCK_BEFORE_LOCKS
        target = cur;
#endif
        atomic {
          if
          :: attached[target] && rows[target] == NONE -> rows[target] = PENDING
          :: else -> target = NP  /* the primary key refuses a second row, or no partition takes it */
          fi
        }
        if
        :: target < NP ->
           if
           :: atomic {
                /* COMMIT: the record is live from here */
                if :: ghostLive > 0 -> mutual_exclusion = false :: else -> skip fi;
                assert(mutual_exclusion);
                rows[target] = LIVE; ghostLive++;
                printf("claimer %d: claimed in partition %d\n", me, target)
              }
           :: rows[target] = NONE  /* ROLLBACK */
           fi
        :: else -> skip
        fi;
        holding--
     fi;
     atomic { inTx--; if :: lockHolder == me + 1 -> lockHolder = 0 :: else -> skip fi }
  :: attempt >= ATTEMPTS -> break
  od
}

/* Time: the next partition becomes current (the maintenance call created it ahead: init). */
active proctype Clock() {
  do
  :: cur < NP - 1 -> cur++
  :: cur == NP - 1 -> break
  od
}

/* Any committed record may reach its expiry (an extended one has not yet). */
active proctype Expiry() {
  end: do
  :: atomic { rows[0] == LIVE -> rows[0] = EXPIRED; ghostLive-- }
  :: atomic { rows[1] == LIVE -> rows[1] = EXPIRED; ghostLive-- }
  :: atomic { rows[2] == LIVE -> rows[2] = EXPIRED; ghostLive-- }
  od
}

/*
 * The reaper: a past partition, under a SHARE lock (it waits while a claim holds the partition,
 * an insert into it not committed among them), with no live row, is checked; then detached and
 * dropped in a second step once the claims using the parent table have ended, as DETACH ...
 * CONCURRENTLY runs after the check's transaction and waits for them.
 */
#define WAITS_FOR_WRITERS(p) KEEP(rows[p] != PENDING && holding == 0) /* guard:partition-drop-waits-writers */
#define NO_LIVE_ROW(p) KEEP(rows[p] != LIVE) /* guard:partition-drop-live-check */
#define DROPPABLE(p) (p < cur && attached[p] && !checked[p] && WAITS_FOR_WRITERS(p) && NO_LIVE_ROW(p))
inline drop(p) {
  attached[p] = false;
  checked[p] = false;
  rows[p] = NONE;
  printf("reaper: dropped partition %d\n", p)
}
active proctype Reaper() {
  end: do
  :: atomic { DROPPABLE(0) -> checked[0] = true }
  :: atomic { DROPPABLE(1) -> checked[1] = true }
  :: atomic { checked[0] && inTx == 0 -> drop(0) }
  :: atomic { checked[1] && inTx == 0 -> drop(1) }
  od
}

init {
  attached[0] = true; attached[1] = true; attached[2] = true;
  atomic { run Claimer(0); run Claimer(1) }
}
