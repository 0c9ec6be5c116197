import { fstatSync, writeSync } from "node:fs";
import { hostname } from "node:os";
import { isatty } from "node:tty";
import type { FastifyBaseLogger, FastifyServerOptions } from "fastify";
import type { TraceLogIds } from "./tracing.js";

/**
 * Headers and fields that carry secrets: never written to a log line. pino
 * applies these only to lines with a `req` or `headers` field, so the per-RPC
 * line (which has neither, and no secret) pays nothing for them.
 */
export const REDACTED = ["req.headers.authorization", "req.headers.cookie", 'req.headers["proxy-authorization"]', "headers.authorization"];

/** The fields of the line each RPC writes, at info level, with msg "rpc". */
export interface RpcFields {
  reqId: string;
  principal: string;
  /** The client's address: the TCP peer, or the client a trusted proxy named (see client-address.ts); "" when unknown. */
  remoteAddress: string;
  rpc: string;
  protocol: string;
  code: string;
  durationMs: number;
}

/**
 * The fields of the line every HTTP request that is not an RPC writes (a 404,
 * /docs, /metrics, a probe), with msg "request": at info, probes at debug.
 */
export interface RequestFields {
  reqId: string;
  method: string;
  /** The request's path without its query string (which may carry a token). */
  path: string;
  /** The status answered; 499 when the client went away before the answer was complete. */
  status: number;
  /** The client's address, as for RpcFields. */
  remoteAddress: string;
  durationMs: number;
  /** A native gRPC stream's status, by the name rpc lines use ("ok", "unimplemented"); absent for other requests. */
  code?: string;
}

/** How a server logs: pino options for fastify, the per-RPC line, and a flush for its shutdown. */
export interface ServerLogging {
  options: FastifyServerOptions["logger"];
  /** Logs the line of one finished call through `log` (the server's root logger), as `log.info(fields, "rpc")` would. */
  rpc(log: FastifyBaseLogger, fields: RpcFields): void;
  /** Logs the line of one HTTP request that was no RPC, as `log[level](fields, "request")` would. */
  request(log: FastifyBaseLogger, level: "info" | "debug", fields: RequestFields): void;
  /** Writes every line logged so far, synchronously: a stopping server calls it last. */
  flush(): void;
}

/** Levels at which info lines are written (no custom levels are configured). */
const INFO_ENABLED = new Set(["trace", "debug", "info"]);
/** Levels at which debug lines are written. */
const DEBUG_ENABLED = new Set(["trace", "debug"]);

/** Whether a logger at `level` writes lines at `at`. */
export function levelEnabled(level: string, at: "info" | "debug"): boolean {
  return (at === "info" ? INFO_ENABLED : DEBUG_ENABLED).has(level);
}

/**
 * pino at LOG_LEVEL, secrets redacted: into a given stream (tests); else
 * human-readable (pino-pretty) when stdout is a terminal; else JSON lines to
 * stdout, written in batches (BatchedLineWriter).
 *
 * Where the lines are JSON, the per-RPC line (and the per-request line of
 * every other HTTP request, see request-log.ts) is formatted here rather than by
 * pino's generic serializer, which cost a busy server about 4 µs a line (twice
 * this): the same keys in the same order as pino writes them (level, time, and
 * pino's base pid and hostname first, msg last), which test/operations/logs.test.ts checks
 * against pino's own lines.
 *
 * With traceIds (tracing on), every line written inside a span (a call's
 * rpc line, an internal error, a delivery's warning) carries its trace_id,
 * span_id and trace_flags, where pino's mixin puts them: after the bindings.
 */
export function serverLogging(level: string, stream?: NodeJS.WritableStream, traceIds?: () => TraceLogIds | undefined): ServerLogging {
  const base = {
    level,
    redact: { paths: REDACTED, censor: "[redacted]" },
    ...(traceIds && { mixin: () => traceIds() ?? {} }),
  };
  // isatty(1), not process.stdout.isTTY: creating process.stdout would make a piped fd 1 non-blocking.
  if (!stream && isatty(1)) {
    return {
      options: { ...base, transport: { target: "pino-pretty", options: { translateTime: "SYS:HH:MM:ss.l" } } },
      rpc: (log, fields) => log.info(fields, "rpc"),
      request: (log, level, fields) => log[level](fields, "request"),
      flush: () => {},
    };
  }
  const out = stream ?? stdoutLines();
  const bindings = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`;
  return {
    options: { ...base, stream: out },
    rpc(log, f) {
      if (!INFO_ENABLED.has(log.level)) return;
      const duration = Number.isFinite(f.durationMs) ? f.durationMs : null;
      const ids = traceIds?.();
      const trace = ids ? `,"trace_id":"${ids.trace_id}","span_id":"${ids.span_id}","trace_flags":"${ids.trace_flags}"` : "";
      out.write(
        `{"level":30,"time":${Date.now()}${bindings}${trace},"reqId":${jsonString(f.reqId)},"principal":${jsonString(f.principal)},` +
          `"remoteAddress":${jsonString(f.remoteAddress)},"rpc":${jsonString(f.rpc)},"protocol":${jsonString(f.protocol)},"code":${jsonString(f.code)},"durationMs":${duration},"msg":"rpc"}\n`,
      );
    },
    request(log, level, f) {
      if (!levelEnabled(log.level, level)) return;
      out.write(
        `{"level":${level === "info" ? 30 : 20},"time":${Date.now()}${bindings},"reqId":${jsonString(f.reqId)},"method":${jsonString(f.method)},` +
          `"path":${jsonString(f.path)},"status":${f.status},${f.code === undefined ? "" : `"code":${jsonString(f.code)},`}` +
          `"remoteAddress":${jsonString(f.remoteAddress)},"durationMs":${f.durationMs},"msg":"request"}\n`,
      );
    },
    flush: () => (out instanceof BatchedLineWriter ? out.flushSync() : undefined),
  };
}

/** Printable ASCII but the quote and the backslash: the characters JSON writes as they are. */
const JSON_AS_IS = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * JSON.stringify(text): the fields of the rpc line (ids, uids, addresses,
 * names) almost always need no escape, and quoting them directly halves the
 * cost of the line (~0.6 instead of ~1.1 µs).
 */
function jsonString(text: string): string {
  return JSON_AS_IS.test(text) ? `"${text}"` : JSON.stringify(text);
}

let stdout: BatchedLineWriter | undefined;

/** The one writer of fd 1 in this process; whatever it holds is written when the process exits, however it exits. */
function stdoutLines(): BatchedLineWriter {
  if (!stdout) {
    const writer = new BatchedLineWriter(1);
    // "exit" also runs on process.exit() and after an uncaught exception: the lines logged just before are kept.
    process.once("exit", () => writer.flushSync());
    stdout = writer;
  }
  return stdout;
}

/** How long a line may wait for others to share its write(2); exit and close flush at once. */
const FLUSH_DELAY_MS = 25;

/** Bytes of lines held before they are written: a burst cannot grow the buffer. */
const BUFFER_BYTES = 64 * 1024;

/** Nothing ever wakes it: Atomics.wait on it is a synchronous 1 ms sleep. */
const SLEEP_CELL = new Int32Array(new SharedArrayBuffer(4));

/** The most a write to a pipe may carry and stay whole (POSIX PIPE_BUF on Linux). */
const PIPE_BUF = 4096;

/** Whether fd is something other than a pipe or socket; unknown (a closed descriptor) counts as a pipe, the safe side. */
function isRegularOrDevice(fd: number): boolean {
  try {
    const st = fstatSync(fd);
    return !st.isFIFO() && !st.isSocket();
  } catch {
    return false;
  }
}

/**
 * Log lines to a file descriptor in batches. A write(2) per line cost a busy
 * server more than formatting the line: here each line is copied into one
 * buffer as it is logged (while pino's freshly built string is still in the
 * cache) and the buffer is written FLUSH_DELAY_MS after its first line (a
 * write per event-loop turn still cost a busy server ~5% of REST Get; one per
 * 25 ms costs ~2%), or at once when it is full. The writes themselves stay
 * synchronous, so no write is ever in flight: flushSync() at exit writes
 * everything, in order, exactly once. To a pipe, each write carries whole
 * lines and at most PIPE_BUF bytes, so the lines of several worker processes
 * sharing it never interleave mid-line (to a file, each write is whole).
 */
export class BatchedLineWriter {
  private readonly buffer = Buffer.allocUnsafe(BUFFER_BYTES);
  private used = 0;
  private scheduled = false;
  /** Set once the reader has gone (EPIPE): lines are dropped from then on. */
  private broken = false;
  private readonly flushLater = () => {
    this.scheduled = false;
    this.flushSync();
  };

  /** The largest write that stays whole on this descriptor. */
  private readonly maxWrite: number;

  constructor(private readonly fd: number) {
    this.maxWrite = isRegularOrDevice(fd) ? Infinity : PIPE_BUF;
  }

  /** pino's DestinationStream: one line, with its newline. */
  write(line: string): void {
    if (this.broken) return;
    // UTF-8 takes at most 3 bytes per UTF-16 unit: with that much room, the whole line fits.
    if (this.used + 3 * line.length > BUFFER_BYTES) {
      this.flushSync();
      if (3 * line.length > BUFFER_BYTES) return this.writeAll(Buffer.from(line));
    }
    this.used += this.buffer.write(line, this.used);
    if (!this.scheduled) {
      this.scheduled = true;
      setTimeout(this.flushLater, FLUSH_DELAY_MS).unref();
    }
  }

  /** pino's logger.flush(cb). */
  flush(cb?: (err?: Error) => void): void {
    this.flushSync();
    cb?.();
  }

  /** Writes every line held, now. */
  flushSync(): void {
    let held = this.buffer.subarray(0, this.used);
    this.used = 0;
    while (held.length > 0) {
      const end = held.length <= this.maxWrite ? held.length : this.lineEnd(held);
      this.writeAll(held.subarray(0, end));
      held = held.subarray(end);
    }
  }

  /** Where the next write of held ends: after its last whole line within maxWrite, or after its first line if that alone is longer. */
  private lineEnd(held: Buffer): number {
    const within = held.lastIndexOf(0x0a, this.maxWrite - 1);
    if (within >= 0) return within + 1;
    const first = held.indexOf(0x0a);
    return first >= 0 ? first + 1 : held.length;
  }

  private writeAll(bytes: Buffer): void {
    while (bytes.length > 0 && !this.broken) {
      try {
        // One write where the descriptor takes it all; a pipe may take part.
        bytes = bytes.subarray(writeSync(this.fd, bytes));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        // A full pipe that someone made non-blocking: wait for the reader, as a blocking write would.
        if (code === "EAGAIN") Atomics.wait(SLEEP_CELL, 0, 0, 1);
        // Logging never takes the API down: a broken pipe stops it, any other failure (a full disk) loses these lines.
        else {
          if (code === "EPIPE") this.broken = true;
          else process.stderr.write(`platform-api: ${bytes.length} bytes of log lines lost: ${String(err)}\n`);
          return;
        }
      }
    }
  }
}
