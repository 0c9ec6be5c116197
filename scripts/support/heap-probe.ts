/**
 * The server's live JavaScript heap, read through its inspector: a full
 * garbage collection, then the heap's used size. RSS alone cannot tell a leak
 * from V8 sizing its heap to the allocation rate (the old generation may grow
 * to several times the live data between full collections); the live heap
 * after a collection can.
 *
 * The server must run with `--inspect=127.0.0.1:0` (startServerProcess's
 * `inspect` option); the inspector speaks the Chrome DevTools protocol over a
 * WebSocket, which every supported Node (22, 24) provides without a flag.
 */

/** How long one inspector command may take: a full GC of a few hundred MiB stays well under it. */
const COMMAND_TIMEOUT_MS = 30_000;

/** The inspector's WebSocket URL in a line of the server's stderr ("Debugger listening on ws://…"), if it is one. */
export function inspectorUrl(line: string): string | undefined {
  return /^Debugger listening on (ws:\/\/\S+)$/.exec(line.trim())?.[1];
}

export interface HeapProbe {
  /** Collects garbage, then returns the bytes the heap still uses. */
  liveBytes(): Promise<number>;
  /** Settles once the inspector session is gone (a server with a session attached waits for it before exiting). */
  close(): Promise<void>;
}

/** Connects to the inspector at url. */
export async function connectHeapProbe(url: string): Promise<HeapProbe> {
  if (typeof WebSocket === "undefined") throw new Error("the heap probe needs WebSocket: run it on Node 22 or later");
  const socket = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    socket.addEventListener("open", () => resolve(), { once: true });
    socket.addEventListener("error", () => reject(new Error(`cannot connect to the inspector at ${url}`)), { once: true });
  });
  let nextId = 1;
  const pending = new Map<number, { resolve(result: unknown): void; reject(err: Error): void }>();
  socket.addEventListener("message", (event: MessageEvent) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } };
    const waiter = message.id === undefined ? undefined : pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id!);
    if (message.error) waiter.reject(new Error(message.error.message));
    else waiter.resolve(message.result);
  });
  const send = (method: string): Promise<unknown> => {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error(`inspector: ${method} took over ${COMMAND_TIMEOUT_MS} ms`));
      }, COMMAND_TIMEOUT_MS);
      pending.set(id, {
        resolve: (result) => (clearTimeout(timer), resolve(result)),
        reject: (err) => (clearTimeout(timer), reject(err)),
      });
      socket.send(JSON.stringify({ id, method }));
    });
  };
  return {
    async liveBytes() {
      await send("HeapProfiler.collectGarbage");
      const usage = (await send("Runtime.getHeapUsage")) as { usedSize: number };
      return usage.usedSize;
    },
    close: () =>
      new Promise<void>((resolve) => {
        if (socket.readyState === WebSocket.CLOSED) return resolve();
        socket.addEventListener("close", () => resolve(), { once: true });
        socket.close();
      }),
  };
}
