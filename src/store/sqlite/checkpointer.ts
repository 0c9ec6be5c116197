import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** How long the checkpoint thread lets commits gather before it checkpoints them. */
const CHECKPOINT_EVERY_MS = 250;

/**
 * The WAL size (pages) at which a committing connection checkpoints itself: the fallback for when the thread is
 * not running or cannot keep up (SQLite's default is 1,000, checked after every commit).
 */
export const FALLBACK_AUTOCHECKPOINT_PAGES = 16_000;

/**
 * The thread's code: plain CommonJS, evaluated (a worker given a file would need the file compiled beside this one
 * in dist/ and a loader for it under tsx). It waits for the main thread's count of commits to move, checkpoints
 * PASSIVE (copies what no reader still needs, never waits for or blocks a reader or the writer), then sleeps
 * CHECKPOINT_EVERY_MS; a stop wakes it at once.
 */
const THREAD = `
const { workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma("synchronous = FULL");
const cell = new Int32Array(workerData.cell);
let seen = 0;
for (;;) {
  Atomics.wait(cell, 0, seen);
  if (Atomics.load(cell, 1) !== 0) break;
  seen = Atomics.load(cell, 0);
  try {
    db.pragma("wal_checkpoint(PASSIVE)");
  } catch {
    // Busy (another process's checkpoint, a backup): the next round copies what this one could not.
  }
  Atomics.wait(cell, 1, 0, workerData.everyMs);
  if (Atomics.load(cell, 1) !== 0) break;
}
db.close();
`;

/**
 * WAL checkpoints off the event loop. SQLite copies committed pages from the
 * WAL back into the database file in a checkpoint, which the committing
 * connection runs itself by default once the WAL holds 1,000 pages: random
 * writes and an fsync of the database file on the event loop, inside a
 * commit's call, every few hundred creates (measured: a fifth of a busy
 * server's create throughput). Here a thread of its own, with its own
 * connection, checkpoints what the last CHECKPOINT_EVERY_MS committed, while
 * the event loop goes on serving. The connection that commits keeps
 * checkpointing itself only past FALLBACK_AUTOCHECKPOINT_PAGES (the thread
 * stopped or fell behind), so the WAL stays bounded either way.
 */
export class BackgroundCheckpointer {
  private readonly cell = new Int32Array(new SharedArrayBuffer(8));
  private readonly worker: Worker;
  private readonly exited: Promise<void>;

  /**
   * Starts the thread on the database at file; onError is told if it fails (the fallback then checkpoints).
   * driver: the module the thread opens the database with (better-sqlite3; another only in tests).
   */
  constructor(file: string, onError: (err: Error) => void, driver = createRequire(import.meta.url).resolve("better-sqlite3")) {
    this.worker = new Worker(THREAD, {
      eval: true,
      workerData: {
        driver,
        file,
        cell: this.cell.buffer,
        everyMs: CHECKPOINT_EVERY_MS,
      },
      // The thread holds a connection and a little memory, nothing a process needs more of.
      resourceLimits: { maxOldGenerationSizeMb: 16 },
    });
    this.worker.on("error", onError);
    this.worker.unref();
    this.exited = new Promise((resolve) => this.worker.once("exit", () => resolve()));
  }

  /** A group committed: the thread checkpoints it in its next round. */
  committed(): void {
    Atomics.add(this.cell, 0, 1);
    Atomics.notify(this.cell, 0);
  }

  /** Stops the thread, its connection closed, before the database is. */
  async stop(): Promise<void> {
    // Unreferenced so it never keeps a process alive on its own; waited for here, it must.
    this.worker.ref();
    Atomics.store(this.cell, 1, 1);
    Atomics.add(this.cell, 0, 1);
    Atomics.notify(this.cell, 0);
    Atomics.notify(this.cell, 1);
    await this.exited;
  }
}
