/**
 * A clock and a sleep for clients that take them (`now`, `sleep` options): a wait is recorded
 * and moves the clock on at once, so a test of delays neither waits nor measures time.
 */
export function fakeTime(startMs = Date.parse('2026-11-27T00:00:00Z')) {
  let nowMs = startMs;
  const waits: number[] = [];
  return {
    waits,
    now: () => nowMs,
    sleep: async (ms: number, signal?: AbortSignal): Promise<void> => {
      if (signal?.aborted) throw signal.reason;
      waits.push(ms);
      nowMs += ms;
    },
  };
}
