import assert from "node:assert/strict";
import { PassThrough } from "node:stream";

/** One JSON log line of the server (msg is "" on a line without one). */
export type LogLine = { msg: string; pid?: number; level?: number; [field: string]: unknown };

/** A line of JSON log output, parsed; msg "" when it has none. */
export function parseLogLine(text: string): LogLine {
  const line = JSON.parse(text) as LogLine;
  return typeof line.msg === "string" ? line : { ...line, msg: "" };
}

/** Every line of text (JSON log output) parsed, as T; fails the test on a line that is not JSON. */
export function parseLogLines<T = LogLine>(text: string): T[] {
  return text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => {
      try {
        return parseLogLine(l) as T;
      } catch {
        assert.fail(`log line is not JSON: ${l}`);
      }
    });
}

/** The server's log lines as they are written, and a wait for one that matches. */
export interface LogWatch {
  lines: LogLine[];
  /** Resolves with the first line (already written or still to come) that matches. */
  next(match: (line: LogLine) => boolean): Promise<LogLine>;
  stream: PassThrough;
}

/** Collects JSON log lines from a stream the server writes to (an in-process server's logStream). */
export function watchLogs(stream = new PassThrough()): LogWatch {
  const lines: LogLine[] = [];
  const waiters: { match: (line: LogLine) => boolean; resolve: (line: LogLine) => void }[] = [];
  let partial = "";
  stream.setEncoding("utf8").on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n");
    partial = parts.pop()!;
    for (const text of parts) {
      if (text.trim() === "") continue;
      const line = parseLogLine(text);
      lines.push(line);
      for (const w of waiters.splice(0)) {
        if (w.match(line)) w.resolve(line);
        else waiters.push(w);
      }
    }
  });
  return {
    lines,
    stream,
    next: (match) => {
      const seen = lines.find(match);
      return seen ? Promise.resolve(seen) : new Promise((resolve) => waiters.push({ match, resolve }));
    },
  };
}
