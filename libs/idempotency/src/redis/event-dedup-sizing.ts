/**
 * How an `EventDeduplicator` is dimensioned: the load it must hold and the error it may make.
 *
 * @publicApi
 */
export interface EventDedupSizingInput {
  /** Events per second the deduplicator must hold at the configured error rate (a peak, not an average). */
  expectedEventsPerSecond: number;
  /** How long a seen id is remembered, in ms: a duplicate within this time is always caught. */
  windowMs: number;
  /**
   * Probability that a new id is reported `maybe-seen` (and costs one exact lookup) when the
   * load is `expectedEventsPerSecond`. @default 0.01
   */
  falsePositiveRate?: number;
  /** Time buckets the window is cut into: more buckets waste less memory at the window's edge, but cost a bitmap read each. @default 6 */
  buckets?: number;
}

/**
 * The derived dimensions (pure arithmetic on `EventDedupSizingInput`). A check reads the current
 * bucket, the next one (where an instance whose clock is ahead marks ids) and the `buckets`
 * before it. Instances whose clocks differ by at most half a bucket catch every duplicate within
 * `windowMs`: the buckets span half a bucket more than the window.
 *
 * @publicApi
 */
export interface EventDedupSizing {
  windowMs: number;
  buckets: number;
  /** Length of one time bucket, in ms: `windowMs / (buckets − ½)`, rounded up, so `buckets` of them span the window and half a bucket of clock skew. */
  bucketMs: number;
  /** Bitmaps one check reads: the current bucket, the next one, and `buckets` older ones. */
  bucketsChecked: number;
  /** Ids one bucket holds at the expected rate. */
  eventsPerBucket: number;
  /** Size of one bucket's bitmap, in bits (`m`). */
  bitsPerBucket: number;
  /** Bit positions per id (`k`). */
  hashes: number;
  /** The false-positive rate of one full bucket. */
  bucketFalsePositiveRate: number;
  /** The false-positive rate of a check when every bucket it reads is full: at most the configured one. */
  falsePositiveRate: number;
  /** Memory of the live bitmaps, in bytes, at most (`bucketsChecked × m / 8`; the next bucket's exists only under clock skew). */
  bytes: number;
  /** `bytes` per id remembered over one window. */
  bytesPerEvent: number;
}

/** Redis strings hold at most 512 MB: a bitmap has at most 2^32 bits. */
const MAX_BITS = 2 ** 32;
const LN2 = Math.LN2;

/**
 * Sizes a time-bucketed Bloom filter: a bucket spans `bucketMs = ⌈windowMs / (buckets − ½)⌉` and
 * holds `n = rate × bucketMs` ids in `m` bits with `k` hash positions, and since a check reads
 * `c = buckets + 2` bitmaps (the next bucket too, for clock skew), each must err with at most
 * `p_b = 1 − (1 − p)^(1/c)`: `m = ⌈−n ln p_b / ln² 2⌉`, `k = round(m/n · ln 2)`.
 *
 * @publicApi
 */
export function sizeEventDeduplicator(input: EventDedupSizingInput): EventDedupSizing {
  const { expectedEventsPerSecond: rate, windowMs } = input;
  const buckets = input.buckets ?? 6;
  const target = input.falsePositiveRate ?? 0.01;
  if (!(Number.isFinite(rate) && rate > 0))
    throw new RangeError(`expectedEventsPerSecond must be a positive number (got ${rate})`);
  if (!(Number.isInteger(windowMs) && windowMs >= 1))
    throw new RangeError(`windowMs must be a positive integer (got ${windowMs})`);
  if (!(Number.isInteger(buckets) && buckets >= 1 && buckets <= 64))
    throw new RangeError(`buckets must be an integer from 1 to 64 (got ${buckets})`);
  if (!(target > 0 && target < 1)) throw new RangeError(`falsePositiveRate must be between 0 and 1 (got ${target})`);
  // `buckets` buckets span the window plus half a bucket: a checker whose clock is ahead by up to
  // half a bucket still reads the bucket an id was marked in windowMs earlier.
  const bucketMs = Math.ceil((2 * windowMs) / (2 * buckets - 1));
  const bucketsChecked = buckets + 2;
  const eventsPerBucket = Math.max(1, Math.ceil((rate * bucketMs) / 1000));
  const perBucketTarget = 1 - (1 - target) ** (1 / bucketsChecked);
  const bitsPerBucket = Math.max(64, Math.ceil((-eventsPerBucket * Math.log(perBucketTarget)) / (LN2 * LN2)));
  if (bitsPerBucket > MAX_BITS) {
    throw new RangeError(
      `a bucket would need ${bitsPerBucket} bits, more than a Redis string holds (2^32): use more buckets, a shorter window, or split the stream over several deduplicators`,
    );
  }
  const hashes = Math.max(1, Math.round((bitsPerBucket / eventsPerBucket) * LN2));
  const bucketFalsePositiveRate = (1 - Math.exp((-hashes * eventsPerBucket) / bitsPerBucket)) ** hashes;
  const falsePositiveRate = 1 - (1 - bucketFalsePositiveRate) ** bucketsChecked;
  const bytes = bucketsChecked * Math.ceil(bitsPerBucket / 8);
  return {
    windowMs,
    buckets,
    bucketMs,
    bucketsChecked,
    eventsPerBucket,
    bitsPerBucket,
    hashes,
    bucketFalsePositiveRate,
    falsePositiveRate,
    bytes,
    bytesPerEvent: bytes / (eventsPerBucket * buckets),
  };
}
