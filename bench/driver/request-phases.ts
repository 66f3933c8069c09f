import type { CpuProfile, HeapProfile, HeapProfileNode, ProfileNode } from './profile-summary.js';

/**
 * The phase table of `npm run bench:profile -- <scenario> --phases` (docs/performance.md): a
 * profile's work per request by phase of an idempotent request. A sample (or an allocation)
 * belongs to the phase of the innermost library frame on its stack, so the zlib, hashing and
 * socket work a library function starts is booked to it; work with no library frame on its stack
 * is the Redis client's (replies parsed on socket data), RxJS's, the garbage collector's, or the
 * rest of the server's (Nest, Express, validation, PostgreSQL: what `plain` also does), and so is
 * work of those inside a library frame (the route run by the interceptor, the response written).
 */
type Frame = ProfileNode['callFrame'];

const BY_FILE: readonly [RegExp, string][] = [
  [/http\/(idempotency-key\.parser|request-scope|scope-resolvers)|engine\/scoped-key/, 'key and scope'],
  [/http\/(fingerprint\/|request-fingerprint|request-body|unread-body|uploaded-files)/, 'fingerprint'],
  [/redis\/(redis-reply-codec|compact-headers|response-packing)/, 'record packing and reply decoding'],
  [/http\/(response-capture|handler-response|replayable-headers)/, 'response capture'],
  [
    /engine\/(claim-settlement|idempotency-runner|live-claims)|http\/(handler-settlement|claimed-request)/,
    'settlement',
  ],
  [/http\/(stored-answer|problem-responses)/, 'replay answer'],
  [/telemetry\//, 'telemetry'],
  [/context\//, 'request context'],
  [/http\/idempotency\.interceptor|engine\/idempotency\.service|engine\//, 'interceptor and engine'],
];
/** Store functions whose work (arguments, command, reply) is one Redis call. */
const STORE_CALLS: Record<string, string> = { claim: 'claim call', complete: 'completion call' };

function libraryFile(url: string): string | undefined {
  return /libs\/idempotency\/(?:dist\/(?:cjs|esm)|src)\/(.+)$/.exec(url)?.[1];
}

/** The phase of the innermost frame that names one, or undefined. */
function phaseOfFrame(frame: Frame): string | undefined {
  const file = libraryFile(frame.url);
  if (!file) return undefined;
  if (/^redis\/(redis-idempotency\.store|write-coalescing|redis-connection)/.test(file)) {
    return (
      STORE_CALLS[frame.functionName] ??
      (file.startsWith('redis/write-coalescing') ? 'Redis writes (socket)' : undefined)
    );
  }
  return BY_FILE.find(([pattern]) => pattern.test(file))?.[1] ?? 'other library code';
}

/**
 * What the server does with or without the library: writing the HTTP response, running the route
 * (pipes, validation, the handler's query), which happen inside the library's frames on an
 * idempotent route, are the rest of the server's.
 */
const SERVER_WORK =
  /^node:_http_|node_modules\/(@nestjs\/(core|common|platform-express)\/|class-validator\/|class-transformer\/|typeorm\/|pg(-[a-z]+)?\/|express\/|body-parser\/)/;

function phaseOfStack(stack: readonly Frame[]): string {
  const leaf = stack[stack.length - 1]!;
  if (leaf.functionName === '(garbage collector)') return '(garbage collector)';
  if (/node_modules\/rxjs\//.test(leaf.url)) return 'RxJS (Nest pipeline and library)';
  for (let i = stack.length - 1; i >= 0; i--) {
    const frame = stack[i]!;
    if (libraryFile(frame.url)) {
      const phase = phaseOfFrame(frame);
      if (phase) return phase;
    } else if (SERVER_WORK.test(frame.url)) {
      return 'rest of the server';
    }
  }
  if (stack.some((frame) => libraryFile(frame.url))) return 'other library code';
  if (stack.some((frame) => /node_modules\/ioredis\//.test(frame.url))) return 'Redis client (ioredis)';
  return 'rest of the server';
}

/** CPU µs per request by phase (profiler on: compare shares and differences, not absolutes). */
export function cpuByPhase(profile: CpuProfile, requests: number): Map<string, number> {
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const phaseOfNode = new Map<number, string>();
  const phases = new Map<string, number>();
  profile.samples.forEach((id, index) => {
    let phase = phaseOfNode.get(id);
    if (phase === undefined) {
      const stack: Frame[] = [];
      for (let at: number | undefined = id; at !== undefined; at = parent.get(at))
        stack.unshift(byId.get(at)!.callFrame);
      const leaf = stack[stack.length - 1]!.functionName;
      phase = leaf === '(idle)' || leaf === '(program)' ? '' : phaseOfStack(stack);
      phaseOfNode.set(id, phase);
    }
    if (phase) phases.set(phase, (phases.get(phase) ?? 0) + (profile.timeDeltas[index] ?? 0) / requests);
  });
  return phases;
}

/** Bytes allocated per request by phase (sampling heap profile). */
export function bytesByPhase(profile: HeapProfile, requests: number): Map<string, number> {
  const phases = new Map<string, number>();
  const visit = (node: HeapProfileNode, stack: Frame[]) => {
    stack.push(node.callFrame);
    if (node.selfSize > 0) {
      const phase = phaseOfStack(stack);
      phases.set(phase, (phases.get(phase) ?? 0) + node.selfSize / requests);
    }
    for (const child of node.children) visit(child, stack);
    stack.pop();
  };
  visit(profile.head, []);
  return phases;
}

/** The phase table as Markdown rows, largest first. */
export function phaseTable(title: string, phases: Map<string, number>, unit: string, digits: number): string {
  const total = [...phases.values()].reduce((sum, value) => sum + value, 0);
  const rows = [...phases]
    .sort((a, b) => b[1] - a[1])
    .map(([phase, value]) => `| ${phase} | ${value.toFixed(digits)} | ${((100 * value) / total).toFixed(1)} % |`);
  return [
    `${title}`,
    `| phase | ${unit} per request | share |`,
    '|---|---:|---:|',
    ...rows,
    `| all | ${total.toFixed(digits)} | |`,
  ].join('\n');
}
