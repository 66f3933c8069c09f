import { Injectable } from '@nestjs/common';

/**
 * Wall-clock milliseconds that never repeat or go back within this process, so two rows created
 * one after the other always sort newest-first by their timestamps (lists also break ties by id).
 */
@Injectable()
export class Clock {
  private last = 0;

  nowMs(): number {
    this.last = Math.max(Date.now(), this.last + 1);
    return this.last;
  }
}
