/**
 * Issue 21 item 4: the docs assets and /openapi.json are compressed once per
 * asset and coding, however many anonymous clients ask at once, and served
 * from storage with ETags; a compressed reply on the dynamic path is bounded
 * in size and in jobs held in the thread pool, so a flood of anonymous GETs
 * cannot keep token signing and verification out of the pool.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { createRequire } from "node:module";
import * as Net from "node:net";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import zlib from "node:zlib";
import { compress, compressBounded, MAX_DYNAMIC_COMPRESS_BYTES, poolCompressions } from "../../src/server/http/compression.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { createGroup, startTestServer, type TestServer } from "../support/server.js";

const ASSET = "/docs/swagger-ui-bundle.js";
const BUNDLE = readFileSync(join(dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json")), "swagger-ui-bundle.js"));

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** One GET over its own connection, the body left coded. */
function get(port: number, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string>, body: Buffer.concat(chunks) }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

/**
 * Writes GETs of path, one per Accept-Encoding in `codings`, pipelined in one
 * write on one connection, and reads the answers (each has a Content-Length).
 */
function pipelined(port: number, path: string, codings: readonly string[]): Promise<Answer[]> {
  const socket = Net.connect(port, "127.0.0.1");
  socket.write(codings.map((c) => `GET ${path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: ${c}\r\n\r\n`).join(""));
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const answers: Answer[] = [];
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        const end = buffered.indexOf("\r\n\r\n");
        if (end < 0) return;
        const [statusLine = "", ...lines] = buffered.subarray(0, end).toString("latin1").split("\r\n");
        const headers = Object.fromEntries(
          lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]),
        );
        const length = Number(headers["content-length"] ?? 0);
        if (buffered.length < end + 4 + length) return;
        answers.push({ status: Number(statusLine.split(" ")[1]), headers, body: buffered.subarray(end + 4, end + 4 + length) });
        buffered = buffered.subarray(end + 4 + length);
        if (answers.length === codings.length) return socket.end();
      }
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(answers));
  });
}

/** The value of platform_static_compressions_total for one asset and coding (0 when absent). */
async function compressionsOf(srv: TestServer, asset: string, coding: string): Promise<number> {
  const text = await scrapeMetrics(srv.url);
  const line = text.split("\n").find((l) => l.startsWith(`platform_static_compressions_total{asset="${asset}",coding="${coding}"}`));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}

describe("stored encodings of the docs assets", () => {
  let srv: TestServer;
  before(async () => (srv = await startTestServer({ env: METRICS_ENV })));
  after(() => srv.close());

  test("concurrent and pipelined anonymous GETs of swagger-ui-bundle.js get identical stored bytes, one compression per coding", async () => {
    const codings = Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? "br, gzip" : "gzip"));
    const [pipes, singles] = await Promise.all([
      Promise.all(Array.from({ length: 6 }, () => pipelined(srv.port, ASSET, codings))),
      Promise.all(Array.from({ length: 12 }, (_, i) => get(srv.port, ASSET, { "accept-encoding": i % 2 ? "gzip" : "br, gzip" }))),
    ]);
    const answers = [...pipes.flat(), ...singles];
    assert.equal(answers.length, 6 * 8 + 12, "every request answered");
    for (const coding of ["br", "gzip"]) {
      const coded = answers.filter((a) => a.headers["content-encoding"] === coding);
      assert.ok(coded.length >= 24, `${coded.length} answers in ${coding}`);
      for (const a of coded) {
        assert.equal(a.status, 200);
        assert.deepEqual(a.body, coded[0]!.body, `every ${coding} answer is the same bytes`);
        assert.equal(a.headers.etag, coded[0]!.headers.etag);
        assert.match(a.headers.vary ?? "", /Accept-Encoding/i);
      }
      const decoded = coding === "br" ? zlib.brotliDecompressSync(coded[0]!.body) : zlib.gunzipSync(coded[0]!.body);
      assert.deepEqual(decoded, BUNDLE, `the ${coding} answer decodes to the file`);
      assert.equal(await compressionsOf(srv, "swagger-ui-bundle.js", coding), 1, `one ${coding} compression of the bundle`);
    }
    assert.equal(await compressionsOf(srv, "swagger-ui.css", "br"), 0, "assets nobody asked for are not compressed");
  });

  test("If-None-Match with the variant's ETag is a 304 with no body; another coding's ETag is not", async () => {
    for (const path of [ASSET, "/openapi.json"]) {
      const br = await get(srv.port, path, { "accept-encoding": "br" });
      assert.equal(br.status, 200);
      assert.match(br.headers.etag ?? "", /^"[\w-]+-br"$/);
      const again = await get(srv.port, path, { "accept-encoding": "br", "if-none-match": `W/${br.headers.etag}` });
      assert.equal(again.status, 304, path);
      assert.equal(again.body.length, 0);
      assert.equal(again.headers.etag, br.headers.etag);
      const gzip = await get(srv.port, path, { "accept-encoding": "gzip", "if-none-match": br.headers.etag! });
      assert.equal(gzip.status, 200, `${path}: a br ETag does not validate the gzip variant`);
      assert.equal(gzip.headers["content-encoding"], "gzip");
      const plain = await get(srv.port, path, { "if-none-match": br.headers.etag! });
      assert.equal(plain.status, 200);
      assert.equal(plain.headers["content-encoding"], undefined);
      assert.notEqual(plain.headers.etag, br.headers.etag);
    }
    assert.equal(await compressionsOf(srv, "openapi.json", "br"), 1);
  });

  test("a token minted and used for the first time completes while anonymous clients flood the bundle", async () => {
    const org = await createGroup(srv.url, null, "flood org");
    let peakPoolJobs = 0;
    const sampler = setInterval(() => (peakPoolJobs = Math.max(peakPoolJobs, poolCompressions.inFlight)), 1);
    const codings = Array.from({ length: 8 }, (_, i) => ["br", "gzip", "br;q=0.5, gzip", "deflate, br"][i % 4]!);
    const flood = Promise.all(Array.from({ length: 16 }, (_, i) => pipelined(srv.port, i % 2 ? ASSET : "/docs/swagger-ui.css", codings)));
    const { token } = await srv.server.tokens.mint(srv.server.adminSubject);
    const authed = await get(srv.port, `/iam/v2beta1/groups/${org.uid}`, { authorization: `Bearer ${token}` });
    assert.equal(authed.status, 200, "the authenticated call completed under the flood");
    assert.equal((JSON.parse(authed.body.toString()) as { uid: string }).uid, org.uid);
    const answers = (await flood).flat();
    clearInterval(sampler);
    assert.equal(answers.length, 16 * 8);
    assert.equal(await compressionsOf(srv, "swagger-ui.css", "br"), 1);
    assert.equal(await compressionsOf(srv, "swagger-ui.css", "gzip"), 1);
    assert.ok(peakPoolJobs <= poolCompressions.capacity, `${peakPoolJobs} compression jobs in the pool at most`);
  });
});

describe("compression on the dynamic path is bounded", () => {
  const json = (bytes: number) => Buffer.from(JSON.stringify({ filler: "ab".repeat(bytes / 2) }).slice(0, bytes));

  test("a body past MAX_DYNAMIC_COMPRESS_BYTES goes as it is; up to 64 KiB it is compressed on the event loop", () => {
    assert.equal(compressBounded(json(MAX_DYNAMIC_COMPRESS_BYTES + 1), MAX_DYNAMIC_COMPRESS_BYTES + 1, "br"), null);
    const small = compressBounded(json(32 * 1024), 32 * 1024, "gzip");
    assert.ok(Buffer.isBuffer(small), "compressed at once");
    assert.equal(zlib.gunzipSync(small).length, 32 * 1024);
  });

  test("with every pool slot taken a larger body goes as it is, and compress() waits for a slot instead of adding a job", async () => {
    const releases: (() => void)[] = [];
    const held = Array.from({ length: poolCompressions.capacity }, () =>
      poolCompressions.tryRun(() => new Promise<void>((resolve) => releases.push(resolve))),
    );
    assert.ok(held.every((h) => h !== null));
    const body = json(256 * 1024);
    assert.equal(compressBounded(body, body.length, "gzip"), null, "no slot: identity");
    const waiting = compress(body, body.length, "br");
    assert.equal(poolCompressions.inFlight, poolCompressions.capacity, "the waiting job holds no pool slot");
    releases.forEach((release) => release());
    await Promise.all(held);
    assert.deepEqual(zlib.brotliDecompressSync(await waiting), body);
    assert.equal(poolCompressions.inFlight, 0);
    const bounded = await compressBounded(body, body.length, "gzip");
    assert.deepEqual(zlib.gunzipSync(bounded!), body, "a free slot: compressed in the pool");
  });
});
