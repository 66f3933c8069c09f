import { Injectable } from '@nestjs/common';
import type { MessageSettlement, SettlementSetup } from './message-settlement.js';

/**
 * The settlements of one application, prepared at startup (`MessageSettlement.prepare`): a
 * decorator's settlement is one object shared by every application of the process, while what
 * it settles with (the queue, from that application's configuration) belongs to each.
 *
 * @internal
 */
@Injectable()
export class ConsumerSettlements {
  private readonly prepared = new WeakMap<MessageSettlement, MessageSettlement>();

  /** Prepares `settlement` for this application (throws when it cannot work here). */
  prepare(settlement: MessageSettlement, setup: SettlementSetup): void {
    this.prepared.set(settlement, settlement.prepare ? settlement.prepare(setup) : settlement);
  }

  /** The settlement to use in this application: the prepared one, else `settlement` itself. */
  of(settlement: MessageSettlement): MessageSettlement {
    return this.prepared.get(settlement) ?? settlement;
  }
}
