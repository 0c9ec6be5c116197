import { PassThrough } from "node:stream";
import tls from "node:tls";
import { startTestServer, type TestServer } from "./server.js";
import type { TestCa } from "./test-ca.js";

/** One JSON log line of the server. */
export type LogLine = Record<string, unknown> & { msg?: string; level?: number };

/** The server's log lines as they are written, and a wait for one that matches. */
export interface LogWatch {
  lines: LogLine[];
  /** Resolves with the first line (already written or still to come) that matches. */
  next(match: (line: LogLine) => boolean): Promise<LogLine>;
  stream: PassThrough;
}

/** Collects JSON log lines from a stream the server writes to. */
export function watchLogs(stream = new PassThrough()): LogWatch {
  const lines: LogLine[] = [];
  const waiters: { match: (line: LogLine) => boolean; resolve: (line: LogLine) => void }[] = [];
  let partial = "";
  stream.setEncoding("utf8").on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n");
    partial = parts.pop()!;
    for (const text of parts) {
      if (text.trim() === "") continue;
      const line = JSON.parse(text) as LogLine;
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

/** A test server and its log lines. */
export type TlsTestServer = TestServer & { logs: LogWatch };

/** A test server serving TLS with ca's server certificate, logging at info into logs. */
export async function startTlsServer(
  ca: TestCa,
  opts: { env?: Record<string, string>; dataDir?: string; databaseUrl?: string } = {},
): Promise<TlsTestServer> {
  const logs = watchLogs();
  const srv = await startTestServer({
    env: { PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: ca.keyFile, LOG_LEVEL: "info", ...opts.env },
    dataDir: opts.dataDir,
    databaseUrl: opts.databaseUrl,
    logStream: logs.stream,
  });
  return Object.assign(srv, { logs });
}

/** What a fresh TLS connection to port sees: the protocol version, ALPN and the server certificate's serial. */
export async function handshake(
  port: number,
  ca: Buffer | Buffer[],
  opts: tls.ConnectionOptions = {},
): Promise<{ version: string | null; alpn: string | false | null; serial: string }> {
  const socket = tls.connect({ host: "127.0.0.1", port, ca, servername: "localhost", ALPNProtocols: ["http/1.1"], ...opts });
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once("secureConnect", resolve);
      socket.once("error", reject);
    });
    return { version: socket.getProtocol(), alpn: socket.alpnProtocol, serial: socket.getPeerCertificate().serialNumber };
  } finally {
    socket.destroy();
  }
}
