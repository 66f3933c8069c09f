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
    origins.push(new HandlerSettlement(true).written(written));
    await later;
    settlement.end();
    expect(origins).toEqual(['early', 'handler']);
  });

  it('keeps telling them apart after every earlier request ended (the storage is disabled in between)', async () => {
    for (let round = 0; round < 3; round++) {
      const first = new HandlerSettlement(true);
      const second = new HandlerSettlement(true);
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

  it('on a route whose handler cannot write, every write before settlement is an outer layer’s', async () => {
    const settlement = new HandlerSettlement(false);
    const origin = await settlement.runHandler(async () => settlement.written(written));
    settlement.settle({ ok: true, value: undefined });
    expect([origin, settlement.written(written)]).toEqual(['early', 'after']);
  });
});
