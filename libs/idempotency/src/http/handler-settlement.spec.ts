import { setTimeout as sleep } from 'node:timers/promises';
import type { CapturedResponse } from './response-capture.js';
import { HandlerSettlement } from './handler-settlement.js';

const written: CapturedResponse = { statusCode: 201, headers: {}, body: Buffer.from('{}'), bodyOmitted: false };

describe('HandlerSettlement', () => {
  it("tells the handler's own write, from a later callback too, from an outer layer's", async () => {
    const settlement = new HandlerSettlement(true);
    const origins: string[] = [];
    let writeLater!: () => void;
    const later = new Promise<void>((resolve) => (writeLater = resolve));
    await settlement.runHandler(async () => {
      await sleep(1);
      setTimeout(() => {
        origins.push(settlement.written(written));
        writeLater();
      }, 5);
    });
    origins.push(new HandlerSettlement(false).written(written));
    await later;
    settlement.end();
    expect(origins).toEqual(['early', 'handler']);
  });

  it('keeps telling them apart after every earlier request ended (the storage is disabled in between)', async () => {
    for (let round = 0; round < 3; round++) {
      const first = new HandlerSettlement(false);
      const second = new HandlerSettlement(false);
      const origins = await Promise.all([
        first.runHandler(async () => {
          await sleep(2);
          return first.written(written);
        }),
        second.runHandler(async () => {
          await sleep(1);
          return first.written(written);
        }),
      ]);
      first.end();
      // The second flow is still open: the first's end must not blind it.
      const stillOwn = await second.runHandler(async () => {
        await sleep(1);
        return second.written(written);
      });
      second.end();
      second.end();
      expect({ origins, stillOwn }).toEqual({ origins: ['handler', 'early'], stillOwn: 'handler' });
    }
  });

  it('on every route, a write from inside the handler flow is the handler’s; outside it, before settlement, an outer layer’s', async () => {
    const settlement = new HandlerSettlement(false);
    const inside = await settlement.runHandler(async () => settlement.written(written));
    const outside = new HandlerSettlement(false);
    const before = outside.written(written);
    outside.settle({ ok: true, value: undefined });
    expect([inside, before, outside.written(written)]).toEqual(['handler', 'early', 'after']);
  });

  it('where Nest renders nothing, a write from a foreign flow (a client made at startup) is the handler’s answer', () => {
    const beforeReturn = new HandlerSettlement(true).written(written);
    const afterReturn = new HandlerSettlement(true);
    afterReturn.settle({ ok: true, value: undefined });
    const afterFailure = new HandlerSettlement(true);
    afterFailure.settle({ ok: false, error: new Error('declined') });
    const afterOuterDrop = new HandlerSettlement(true);
    afterOuterDrop.dropped();
    expect([
      beforeReturn,
      afterReturn.written(written),
      afterFailure.written(written),
      afterOuterDrop.written(written),
    ]).toEqual(['handler', 'handler', 'after', 'early']);
  });

  it('waits for the rendering without a timer: the write, the client leaving, or an outer retry ends the wait', async () => {
    const rendered = new HandlerSettlement(false);
    rendered.settle({ ok: true, value: 1 });
    const waitingForWrite = rendered.writeAfterSettlement(60_000);
    rendered.written(written);
    const left = new HandlerSettlement(false);
    left.settle({ ok: true, value: 1 });
    const waitingForClient = left.writeAfterSettlement(60_000);
    left.close();
    const retried = new HandlerSettlement(false);
    retried.settle({ ok: false, error: new Error('declined') });
    const waitingForRetry = retried.writeAfterSettlement(60_000);
    retried.supersede();
    expect(await Promise.all([waitingForWrite, waitingForClient, waitingForRetry])).toEqual([
      written,
      undefined,
      undefined,
    ]);
  });

  it('a @Res() handler that never answers: the wait ends at the route’s bound, without an answer', async () => {
    const settlement = new HandlerSettlement(true);
    settlement.settle({ ok: true, value: undefined });
    expect(await settlement.handlerAnswer(5)).toBeUndefined();
  });
});
