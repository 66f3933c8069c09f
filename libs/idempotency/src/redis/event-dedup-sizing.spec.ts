import { sizeEventDeduplicator } from './event-dedup-sizing.js';

describe('sizeEventDeduplicator', () => {
  it('cuts the window and half a bucket into buckets, and reads two more than it has (the current one and the next)', () => {
    const sizing = sizeEventDeduplicator({ expectedEventsPerSecond: 1000, windowMs: 55_000, buckets: 6 });
    // 6 buckets of 10 s span the 55 s window and half a bucket of clock skew.
    expect(sizing).toMatchObject({ bucketMs: 10_000, buckets: 6, bucketsChecked: 8, eventsPerBucket: 10_000 });
    expect(sizing.buckets * sizing.bucketMs).toBeGreaterThanOrEqual(sizing.windowMs + sizing.bucketMs / 2);
  });

  it('gives each bucket the Bloom filter that keeps a check of all of them under the target rate', () => {
    const sizing = sizeEventDeduplicator({
      expectedEventsPerSecond: 100,
      windowMs: 10_000,
      buckets: 1,
      falsePositiveRate: 0.01,
    });
    // A 20 s bucket: n = 2000 ids, 3 buckets read: each may err with p_b = 1 - 0.99^(1/3).
    const perBucket = 1 - Math.cbrt(0.99);
    expect(sizing.bucketMs).toBe(20_000);
    expect(sizing.eventsPerBucket).toBe(2000);
    expect(sizing.bitsPerBucket).toBe(Math.ceil((-2000 * Math.log(perBucket)) / Math.LN2 ** 2));
    expect(sizing.hashes).toBe(Math.round((sizing.bitsPerBucket / 2000) * Math.LN2));
    expect(sizing.bucketFalsePositiveRate).toBeLessThanOrEqual(perBucket * 1.01);
    expect(sizing.falsePositiveRate).toBeLessThanOrEqual(0.0101);
    expect(sizing.falsePositiveRate).toBeGreaterThan(0.009);
  });

  it.each([0.1, 0.01, 0.001, 0.0001])(
    'meets a target rate of %p with about 1.44·log2(1/p) bits per id per bucket read',
    (target) => {
      const sizing = sizeEventDeduplicator({
        expectedEventsPerSecond: 5_000,
        windowMs: 3_600_000,
        buckets: 6,
        falsePositiveRate: target,
      });
      expect(sizing.falsePositiveRate).toBeLessThanOrEqual(target * 1.02);
      const perBucket = 1 - (1 - target) ** (1 / 8);
      expect(sizing.bitsPerBucket / sizing.eventsPerBucket).toBeCloseTo(-Math.log2(perBucket) / Math.LN2, 2);
    },
  );

  it('memory grows with the rate and the window, and is reported per id remembered', () => {
    const base = sizeEventDeduplicator({ expectedEventsPerSecond: 1_000, windowMs: 600_000 });
    const doubleRate = sizeEventDeduplicator({ expectedEventsPerSecond: 2_000, windowMs: 600_000 });
    expect(doubleRate.bytes / base.bytes).toBeCloseTo(2, 2);
    expect(base.bytes).toBe(base.bucketsChecked * Math.ceil(base.bitsPerBucket / 8));
    expect(base.bytesPerEvent).toBeCloseTo(base.bytes / (base.eventsPerBucket * base.buckets), 6);
    // At 1 % a bucket needs ~13.9 bits per id, and 8 are read for a window of 6: ~2.3 bytes per id.
    expect(base.bytesPerEvent).toBeGreaterThan(1.5);
    expect(base.bytesPerEvent).toBeLessThan(2.5);
  });

  it('refuses impossible input, and buckets larger than a Redis string', () => {
    expect(() => sizeEventDeduplicator({ expectedEventsPerSecond: 0, windowMs: 1000 })).toThrow(
      /expectedEventsPerSecond/,
    );
    expect(() => sizeEventDeduplicator({ expectedEventsPerSecond: 1, windowMs: 0 })).toThrow(/windowMs/);
    expect(() => sizeEventDeduplicator({ expectedEventsPerSecond: 1, windowMs: 1000, falsePositiveRate: 1 })).toThrow(
      /falsePositiveRate/,
    );
    expect(() => sizeEventDeduplicator({ expectedEventsPerSecond: 1, windowMs: 1000, buckets: 0 })).toThrow(/buckets/);
    expect(() =>
      sizeEventDeduplicator({ expectedEventsPerSecond: 10_000_000, windowMs: 86_400_000, buckets: 1 }),
    ).toThrow(/2\^32/);
  });
});
