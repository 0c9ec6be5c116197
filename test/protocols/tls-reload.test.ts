/**
 * The TLS certificate is re-read without dropping a connection: when its
 * files are replaced (by rename, as editors and certbot do) and on SIGHUP, in
 * one process and in every worker. A new handshake gets the new certificate
 * while connections opened before keep working; a half-written or
 * mismatched pair keeps the served one. A bad pair at start-up is one line
 * and exit 2, as every start-up failure.
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { once } from "node:events";
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import http2 from "node:http2";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { TLSSocket } from "node:tls";
import { within } from "../support/assertions.js";
import { platformCli } from "../support/platform-cli.js";
import { isListening, startServeProcess } from "../support/serve-process.js";
import { createTestCa, type TestCa } from "../support/test-ca.js";
import { handshake, startTlsServer, type TlsTestServer } from "../support/tls-server.js";

/** A watched change is picked up within a few seconds; this only bounds a failing run. */
const LIVENESS_MS = 60_000;

let dir: string;
let first: TestCa;
let second: TestCa;
/** Clients trust both CAs: the replacement certificate is the second CA's. */
let trusted: Buffer[];

before(() => {
  dir = mkdtempSync(join(tmpdir(), "platform-tls-reload-"));
  first = createTestCa(join(dir, "first"));
  second = createTestCa(join(dir, "second"));
  trusted = [first.ca, second.ca];
});
after(() => rmSync(dir, { recursive: true, force: true }));

const serialOf = (pem: Buffer) => new X509Certificate(pem).serialNumber;

/** Serves files that start as a copy of first's certificate and key. */
function servedFiles(name: string): { certFile: string; keyFile: string } {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  copyFileSync(first.certFile, certFile);
  copyFileSync(first.keyFile, keyFile);
  return { certFile, keyFile };
}

/** Replaces file with bytes the way editors and certbot do: a new file renamed over the old one. */
function replace(file: string, bytes: Buffer | string): void {
  writeFileSync(`${file}.new`, bytes);
  renameSync(`${file}.new`, file);
}

/** GET /healthz on agent; the serial of the certificate its connection got, and whether the connection was reused. */
function healthz(port: number, agent: https.Agent): Promise<{ status: number; serial: string; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: "localhost", port, path: "/healthz", agent }, (res) => {
      const serial = (res.socket as TLSSocket).getPeerCertificate().serialNumber;
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode!, serial, reused: req.reusedSocket }));
    });
    req.on("error", reject);
  });
}

/** A grpc.health.v1 Health/Check on an open HTTP/2 session: its grpc-status. */
async function healthCheck(session: http2.ClientHttp2Session): Promise<string> {
  const stream = session.request({
    ":method": "POST",
    ":path": "/grpc.health.v1.Health/Check",
    "content-type": "application/grpc",
    te: "trailers",
  });
  stream.end(Buffer.alloc(5));
  stream.resume();
  const [trailers] = (await once(stream, "trailers")) as [http2.IncomingHttpHeaders];
  return String(trailers["grpc-status"]);
}

const reloaded = (trigger: string) => (l: { msg?: string; trigger?: unknown }) =>
  l.msg === "TLS certificate reloaded" && l.trigger === trigger;
const refused = (l: { msg?: string }) => typeof l.msg === "string" && l.msg.startsWith("TLS certificate not reloaded");

describe("replacing the files", () => {
  let srv: TlsTestServer;
  let files: { certFile: string; keyFile: string };
  before(async () => {
    files = servedFiles("watched");
    srv = await startTlsServer({ ...first, ...files });
  });
  after(() => srv?.close());

  test("a new certificate renamed over the old one is served to new handshakes; HTTP/1.1 and HTTP/2 connections opened before keep working", async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: trusted });
    const session = http2.connect(`https://localhost:${srv.port}`, { ca: trusted });
    try {
      const before = await healthz(srv.port, agent);
      assert.deepEqual(before, { status: 200, serial: serialOf(first.cert), reused: false });
      assert.equal(await healthCheck(session), "0");
      replace(files.keyFile, second.key);
      replace(files.certFile, second.cert);
      const line = await within(LIVENESS_MS, srv.logs.next(reloaded("file change")), "the reload's log line");
      assert.equal(line.serialNumber, serialOf(second.cert));
      assert.equal(line.subject, "CN=localhost");
      assert.equal(typeof line.expires, "string");
      assert.equal((await handshake(srv.port, trusted)).serial, serialOf(second.cert), "a new connection gets the new certificate");
      assert.deepEqual(await healthz(srv.port, agent), { status: 200, serial: serialOf(first.cert), reused: true });
      assert.equal(await healthCheck(session), "0", "an HTTP/2 connection opened before serves on");
      assert.equal((session.socket as TLSSocket).getPeerCertificate().serialNumber, serialOf(first.cert));
    } finally {
      session.close();
      agent.destroy();
    }
  });

  test("a half-written certificate, then a mismatched pair, keep the served one and log a warning each", async () => {
    /** The next refusal logged after now. */
    const nextRefusal = () => {
      const seen = srv.logs.lines.filter(refused).length;
      return within(
        LIVENESS_MS,
        srv.logs.next((l) => refused(l) && srv.logs.lines.filter(refused).indexOf(l) >= seen),
        "a warning",
      );
    };
    const serving = (await handshake(srv.port, trusted)).serial;
    const pem = readFileSync(files.certFile, "utf8");
    const half = nextRefusal();
    replace(files.certFile, pem.slice(0, pem.length / 2));
    assert.equal((await half).level, 40);
    assert.equal((await handshake(srv.port, trusted)).serial, serving);

    const mismatch = nextRefusal();
    replace(files.certFile, first.cert); // with the second CA's key
    assert.match(String((await mismatch).err), /key values mismatch/);
    assert.equal((await handshake(srv.port, trusted)).serial, serving);
  });
});

describe("SIGHUP", () => {
  for (const workers of [1, 2]) {
    test(`re-reads the certificate in ${workers === 1 ? "the process" : "every worker (the primary passes it on)"}`, async () => {
      const files = servedFiles(`hup-${workers}`);
      const dataDir = mkdtempSync(join(dir, "data-"));
      const proc = await startServeProcess({
        PLATFORM_TLS_CERT_FILE: files.certFile,
        PLATFORM_TLS_KEY_FILE: files.keyFile,
        PLATFORM_DATA_DIR: dataDir,
        PLATFORM_WORKERS: String(workers),
        LOG_LEVEL: "info",
      });
      try {
        // Ready: every worker has logged its start-up line.
        const started = new Set(
          proc
            .lines()
            .filter(isListening)
            .map((l) => l.pid),
        );
        assert.equal(started.size, workers, `${workers} start-up lines`);
        copyFileSync(second.keyFile, files.keyFile);
        copyFileSync(second.certFile, files.certFile);
        proc.kill("SIGHUP");
        const reloadedBy = new Set<unknown>();
        await proc.logged((l) => reloaded("SIGHUP")(l) && reloadedBy.add(l.pid).size === workers, "reload lines", LIVENESS_MS);
        assert.deepEqual(reloadedBy, started, "each worker reloaded");
        assert.equal((await handshake(proc.port, trusted)).serial, serialOf(second.cert));
        assert.equal(proc.child.exitCode, null, "SIGHUP does not stop the server");
      } finally {
        await proc.stop();
      }
    });
  }
});

describe("start-up with a bad pair, from the command line", () => {
  /** `serve` run to its end (it is not expected to start). */
  const serveFailing = (env: Record<string, string>) => platformCli(join(dir, "bad"), ["serve"], { HOST: "127.0.0.1", PORT: "0", ...env });

  test("a mismatched pair: one line naming the files, exit 2", async () => {
    const run = await serveFailing({ PLATFORM_TLS_CERT_FILE: first.certFile, PLATFORM_TLS_KEY_FILE: second.keyFile });
    assert.equal(run.code, 2);
    assert.match(
      run.stderr,
      /^platform-api: TLS certificate .*first\/server\.crt with key .*second\/server\.key is unusable: .*key values mismatch\n$/,
    );
  });

  test("a certificate without a key: a configuration error, exit 2", async () => {
    const run = await serveFailing({ PLATFORM_TLS_CERT_FILE: first.certFile });
    assert.equal(run.code, 2);
    assert.match(run.stderr, /PLATFORM_TLS_CERT_FILE is set but PLATFORM_TLS_KEY_FILE is not: set both or neither/);
  });
});
