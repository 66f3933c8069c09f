import { buildOrdersAppOnce, startOrdersProcess, type OrdersProcess } from './app-process.js';

/**
 * Several instances of the compiled orders service on one database and one Redis, as behind a
 * load balancer: started together, each killable (SIGKILL) and restartable with the same
 * configuration.
 */
export interface OrdersCluster {
  /** The instances, by slot; a killed slot holds its dead process until `restart`. */
  readonly instances: readonly OrdersProcess[];
  /** Whether the instance in `slot` is running. */
  isUp(slot: number): boolean;
  /** SIGKILL (no shutdown hooks, as a crash); resolves once the process is gone. */
  kill(slot: number): Promise<void>;
  /** Starts a new process in `slot` with the cluster's environment (it must print its "listening on" line: keep LOG_LEVEL at `log` or below). */
  restart(slot: number): Promise<void>;
  /** Stops every running instance (SIGTERM). */
  stop(): Promise<void>;
}

export async function startOrdersCluster(size: number, env: Record<string, string>): Promise<OrdersCluster> {
  await buildOrdersAppOnce();
  // Each process gets its own copy: a service must not share state with another through it.
  const start = () => startOrdersProcess({ env: { ...env }, timeoutMs: 60_000 });
  const started = await Promise.allSettled(Array.from({ length: size }, start));
  const instances = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await Promise.all(instances.map((instance) => instance.stop()));
    throw failed.reason;
  }
  const up = (slot: number) => {
    const { child } = instances[slot];
    return child.exitCode === null && child.signalCode === null;
  };
  return {
    instances,
    isUp: up,
    async kill(slot) {
      if (!up(slot)) return;
      const { child } = instances[slot];
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
    async restart(slot) {
      instances[slot] = await start();
    },
    async stop() {
      await Promise.all(instances.map((instance) => instance.stop()));
    },
  };
}
