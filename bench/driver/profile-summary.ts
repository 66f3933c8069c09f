/**
 * Summaries of V8 profiles taken by the bench tools (`npm run bench:profile`, `npm run bench:engine`):
 * self time and allocation per request, by package, library file and function.
 */
export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface HeapProfileNode {
  callFrame: ProfileNode['callFrame'];
  selfSize: number;
  children: HeapProfileNode[];
}
export interface HeapProfile {
  head: HeapProfileNode;
}

/** Time the V8 profiler books on nothing the process did for a request. */
const NOT_WORK = new Set(['(idle)', '(program)']);
/** Where a function lives: this library's file, a package, or Node's internals. */
function ownerOf(url: string): string {
  if (!url) return '(native)';
  const library = /libs\/idempotency\/(?:dist|src)\/(.+)$/.exec(url);
  if (library) return `nestjs-idempotency/${library[1]}`;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\/(?!.*node_modules)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url;
  return url.split('/').slice(-2).join('/');
}

/** Self time per owner and per function, in µs per request, over the profile's working samples. */
export function summarizeProfile(profile: CpuProfile, requests: number, top: number): string {
  const selfMicros = new Map<number, number>();
  profile.samples.forEach((id, index) =>
    selfMicros.set(id, (selfMicros.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0)),
  );
  const byOwner = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let work = 0;
  for (const node of profile.nodes) {
    const micros = selfMicros.get(node.id) ?? 0;
    const { functionName, url, lineNumber } = node.callFrame;
    if (micros === 0 || NOT_WORK.has(functionName)) continue;
    work += micros;
    const owner = functionName === '(garbage collector)' ? '(garbage collector)' : ownerOf(url);
    byOwner.set(owner, (byOwner.get(owner) ?? 0) + micros);
    const fn = `${functionName || '(anonymous)'}  ${owner}:${lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + micros);
  }
  const table = (title: string, rows: Map<string, number>) =>
    ranked(title, rows, top, (micros) => `${(micros / requests).toFixed(1).padStart(7)} µs  ${percent(micros, work)}`);
  return [
    `profiled work: ${(work / requests).toFixed(0)} µs/req`,
    table('-- self time by package / library file', byOwner),
    table('-- self time by function', byFunction),
  ].join('\n');
}

/** What a sampling heap profile allocated (self sizes): in all, by owner and by function. */
export function allocationsOf(profile: HeapProfile): {
  total: number;
  byOwner: Map<string, number>;
  byFunction: Map<string, number>;
} {
  const byOwner = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let total = 0;
  const visit = (node: HeapProfileNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    if (node.selfSize > 0) {
      total += node.selfSize;
      const owner = ownerOf(url);
      byOwner.set(owner, (byOwner.get(owner) ?? 0) + node.selfSize);
      const fn = `${functionName || '(anonymous)'}  ${owner}:${lineNumber + 1}`;
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + node.selfSize);
    }
    for (const child of node.children) visit(child);
  };
  visit(profile.head);
  return { total, byOwner, byFunction };
}

/** Bytes allocated per request, by owner and by function (the sampling heap profile's self sizes). */
export function summarizeAllocations(profile: HeapProfile, requests: number, top: number): string {
  const { total, byOwner, byFunction } = allocationsOf(profile);
  const table = (title: string, rows: Map<string, number>) =>
    ranked(
      title,
      rows,
      top,
      (bytes) =>
        `${Math.round(bytes / requests)
          .toString()
          .padStart(7)} B  ${percent(bytes, total)}`,
    );
  return [
    `allocated: ${Math.round(total / requests)} bytes/req`,
    table('-- allocated by package / library file', byOwner),
    table('-- allocated by function', byFunction),
  ].join('\n');
}

/** `title`, then the `top` rows by value, largest first, each as `format(value)` and its name. */
export function ranked(
  title: string,
  rows: Map<string, number>,
  top: number,
  format: (value: number) => string,
): string {
  const lines = [...rows]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([name, value]) => `${format(value)}  ${name}`);
  return [title, ...lines].join('\n');
}

function percent(part: number, whole: number): string {
  return `${((100 * part) / whole).toFixed(1).padStart(5)} %`;
}
