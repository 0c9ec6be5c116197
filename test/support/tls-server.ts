import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { watchLogs, type LogWatch } from "./log-lines.js";
import { startTestServer, type TestServer } from "./server.js";
import { createTestCa, type TestCa } from "./test-ca.js";

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

/**
 * A test CA made in a fresh temporary directory (dir) and a TLS test server with its certificate (opts as
 * startTlsServer's); close() stops the server and removes the directory.
 */
export async function startTlsServerWithCa(
  opts: Parameters<typeof startTlsServer>[1] = {},
): Promise<{ dir: string; ca: TestCa; srv: TlsTestServer; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), "platform-tls-"));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    const ca = createTestCa(join(dir, "ca"));
    const srv = await startTlsServer(ca, opts);
    return {
      dir,
      ca,
      srv,
      async close() {
        await srv.close();
        remove();
      },
    };
  } catch (err) {
    remove();
    throw err;
  }
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
