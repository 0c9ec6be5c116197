/**
 * A counting semaphore over jobs sent to libuv's thread pool. The pool is
 * small (4 threads unless UV_THREADPOOL_SIZE says otherwise) and shared by
 * everything that leaves the event loop: WebCrypto's sign and verify (every
 * token minted, every first use of a token), DNS lookups of issuer fetches,
 * zlib. Work one client can cause there must leave the rest of the pool free.
 */
export class PoolJobs {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly capacity: number) {}

  /** Jobs in the pool now. */
  get inFlight(): number {
    return this.running;
  }

  /** Runs job at once when a slot is free; null (and no job) when all are taken. */
  tryRun<T>(job: () => Promise<T>): Promise<T> | null {
    if (this.running >= this.capacity) return null;
    this.running++;
    return this.finally(job);
  }

  /** Runs job when a slot is free, waiting on the event loop (not in the pool) until then. */
  async run<T>(job: () => Promise<T>): Promise<T> {
    if (this.running >= this.capacity) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    return this.finally(job);
  }

  /** Runs job in a slot already taken and hands the slot on (to a waiter, or back) when it settles. */
  private async finally<T>(job: () => Promise<T>): Promise<T> {
    try {
      return await job();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}
