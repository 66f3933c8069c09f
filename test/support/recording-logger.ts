import type { LoggerService } from '@nestjs/common';

export interface LogEntry {
  level: 'log' | 'error' | 'warn' | 'debug' | 'verbose' | 'fatal';
  text: string;
}

/** A Nest logger that keeps what it is told instead of printing it, for assertions. */
export class RecordingLogger implements LoggerService {
  readonly entries: LogEntry[] = [];

  log(...parts: unknown[]) {
    this.record('log', parts);
  }
  error(...parts: unknown[]) {
    this.record('error', parts);
  }
  warn(...parts: unknown[]) {
    this.record('warn', parts);
  }
  debug(...parts: unknown[]) {
    this.record('debug', parts);
  }
  verbose(...parts: unknown[]) {
    this.record('verbose', parts);
  }
  fatal(...parts: unknown[]) {
    this.record('fatal', parts);
  }

  /** Everything logged at `level`, one string per call. */
  at(level: LogEntry['level']): string[] {
    return this.entries.filter((e) => e.level === level).map((e) => e.text);
  }

  private record(level: LogEntry['level'], parts: unknown[]) {
    this.entries.push({ level, text: parts.map((p) => (p instanceof Error ? p.stack : String(p))).join(' ') });
  }
}
