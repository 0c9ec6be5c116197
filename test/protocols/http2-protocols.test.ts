/**
 * Issue 22 §1: every protocol on every transport. Over HTTP/2 with prior
 * knowledge on the one port, REST, Connect (POST and GET), gRPC-Web (binary
 * and text), gRPC and the plain routes answer as over HTTP/1.1, errors with
 * the same bodies; a 415 carries the spec's error body on both transports;
 * a body over its limit is refused without being read; and one connection
 * carries gRPC and REST streams at once.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { once } from "node:events";
import http2 from "node:http2";
import type net from "node:net";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { gunzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import type * as grpc from "@grpc/grpc-js";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { GetGroupRequestSchema, GroupSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { connectError, within } from "../support/assertions.js";
import { testTransport } from "../support/connect.js";
import { frame, parseFrames } from "../support/grpc-web-frames.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { METRICS_AUTH, METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { startTestServer, type TestServer } from "../support/server.js";

const KiB = 1024;
const MiB = 1024 * KiB;
const GROUPS = "/platformapi.iam.v2beta1.GroupsService";
const MISSING = "0".repeat(40);
/** Well above one stream's flow-control window (64 KiB) and what arrives with the headers, far below the bodies sent. */
const SLACK = 1 * MiB;

let srv: TestServer;
/** The server side of every connection, by the client's port. */
const serverSockets = new Map<number, net.Socket>();

before(async () => {
  srv = await startTestServer({ env: METRICS_ENV });
  srv.server.app.server.on("connection", (socket: net.Socket) => serverSockets.set(socket.remotePort!, socket));
});
after(async () => {
  await srv.close();
});

/** What one HTTP/2 request got. */
interface H2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
  /** Whether the server reset the stream while the client was still sending its body (RST_STREAM after the answer). */
  reset: boolean;
  /** Bytes the server had read of the whole connection when the answer had arrived. */
  serverRead: number;
}

/** Runs fn on an h2c session with prior knowledge, closed after it. */
async function onH2c<T>(fn: (session: http2.ClientHttp2Session) => Promise<T>): Promise<T> {
  const session = http2.connect(srv.url);
  session.on("error", () => {});
  try {
    await within(30_000, once(session, "connect"), "h2c connect");
    return await fn(session);
  } finally {
    session.close();
  }
}

/**
 * One request on session: `chunks` are written lazily with backpressure until
 * the server answers (so a refused body is never sent whole), then the body
 * ends. Resolves once the answer is complete and the stream is closed, or,
 * for a body still being sent, once the server has reset the stream.
 */
function h2Request(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  chunks: Iterable<Buffer | string> = [],
): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ":method": "GET", authorization: `Bearer ${srv.adminToken}`, ...headers });
    let answer: Pick<H2Answer, "status" | "headers"> | undefined;
    let ended = false;
    let reset = false;
    const parts: Buffer[] = [];
    const settle = () => {
      if (!answer || !ended || !(reset || req.closed)) return;
      const socket = serverSockets.get(session.socket.localPort!);
      resolve({ ...answer, body: Buffer.concat(parts), reset, serverRead: socket?.bytesRead ?? Number.NaN });
      req.close();
    };
    req.on("response", (h) => (answer = { status: Number(h[":status"]), headers: h }));
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => ((ended = true), settle()));
    // Node's client says 'aborted' when the server resets a stream whose body it is still sending.
    req.on("aborted", () => ((reset = true), settle()));
    req.on("error", () => {});
    req.on("close", () => (answer && ended ? settle() : reject(new Error(`no answer (RST_STREAM ${req.rstCode})`))));
    const source = chunks[Symbol.iterator]();
    const pump = () => {
      for (let next = source.next(); answer === undefined && !next.done; next = source.next()) {
        if (!req.write(next.value)) return void req.once("drain", pump);
      }
      if (answer === undefined && !req.closed) req.end();
    };
    pump();
  });
}

const json = (a: H2Answer) => JSON.parse(a.body.toString("utf8"));
/** The ErrorInfo reason and the BadRequest fields of a REST error body. */
function restError(body: { details: { "@type": string; reason?: string; fieldViolations?: { field: string }[] }[] }) {
  return {
    reason: body.details.find((d) => d["@type"].endsWith("ErrorInfo"))?.reason,
    fields: body.details.find((d) => d["@type"].endsWith("BadRequest"))?.fieldViolations?.map((v) => v.field),
  };
}

/** `count` chunks of `size` bytes of `fill`. */
function* repeated(count: number, size: number, fill = "a"): Generator<Buffer> {
  const chunk = Buffer.alloc(size, fill);
  for (let i = 0; i < count; i++) yield chunk;
}

describe("REST and the plain routes over h2c", () => {
  test("a success and an error, with the same bodies as over HTTP/1.1", async () => {
    await onH2c(async (session) => {
      const created = await h2Request(session, { ":method": "POST", ":path": "/iam/v2beta1/groups", "content-type": "application/json" }, [
        JSON.stringify({ name: "h2 org" }),
      ]);
      assert.equal(created.status, 200);
      assert.equal(json(created).name, "h2 org");
      assert.match(String(created.headers["x-request-id"]), /./, "request ids on HTTP/2 too");

      const missing = await h2Request(session, { ":path": `/iam/v2beta1/groups/${MISSING}` });
      const overH1 = await fetch(`${srv.url}/iam/v2beta1/groups/${MISSING}`, { headers: { authorization: `Bearer ${srv.adminToken}` } });
      assert.equal(missing.status, 404);
      assert.deepEqual(json(missing), await overH1.json());
      assert.equal(restError(json(missing)).reason, "NOT_FOUND");
    });
  });

  test("/healthz, /readyz, /metrics, /openapi.json and /docs assets, compressed as over HTTP/1.1", async () => {
    await onH2c(async (session) => {
      assert.deepEqual(json(await h2Request(session, { ":path": "/healthz" })), { status: "ok" });
      assert.deepEqual(json(await h2Request(session, { ":path": "/readyz" })), { status: "ready" });
      // Compressed on the fly (installResponseCompression), as over HTTP/1.1.
      const metrics = await h2Request(session, { ":path": "/metrics", "accept-encoding": "gzip", ...METRICS_AUTH });
      assert.equal(metrics.status, 200);
      assert.equal(metrics.headers["content-encoding"], "gzip");
      assert.match(gunzipSync(metrics.body).toString(), /platform_/);
      const openapi = await h2Request(session, { ":path": "/openapi.json" });
      assert.equal(json(openapi).openapi, "3.1.0");
      const docs = await h2Request(session, { ":path": "/docs" });
      assert.equal(docs.status, 200);
      assert.match(String(docs.headers["content-type"]), /^text\/html/);
      // Compressed once, at start-up (stored-encodings.ts).
      const css = await h2Request(session, { ":path": "/docs/swagger-ui.css", "accept-encoding": "gzip" });
      assert.equal(css.status, 200);
      assert.equal(css.headers["content-encoding"], "gzip");
      assert.match(gunzipSync(css.body).toString(), /swagger-ui/);
      const head = await h2Request(session, { ":method": "HEAD", ":path": "/healthz" });
      assert.equal(head.status, 200);
      assert.equal(head.body.byteLength, 0);
    });
  });

  test("curl --http2-prior-knowledge: a REST success, and a 415 with the spec's body", async () => {
    const curl = async (...args: string[]) => {
      const { stdout } = await promisify(execFile)("curl", [
        "-sS",
        "--http2-prior-knowledge",
        "-w",
        "\n%{http_version} %{http_code}",
        ...args,
      ]);
      const lines = stdout.trimEnd().split("\n");
      return { status: lines.pop()!, body: lines.join("\n") };
    };
    const auth = `Authorization: Bearer ${srv.adminToken}`;
    const ok = await curl("-H", auth, `${srv.url}/iam/v2beta1/groups?pageSize=1`);
    assert.equal(ok.status, "2 200");
    assert.ok(Array.isArray(JSON.parse(ok.body).groups));
    const refused = await curl("-H", auth, "-H", "Content-Type: text/xml", "-d", "<group/>", `${srv.url}/iam/v2beta1/groups`);
    assert.equal(refused.status, "2 415");
    assert.deepEqual(restError(JSON.parse(refused.body)), { reason: "INVALID_ARGUMENT", fields: ["Content-Type"] });
  });
});

describe("Connect and gRPC-Web over h2c (connect-node, httpVersion 2)", () => {
  for (const kind of ["connect-h2c", "connect-get-h2c", "grpc-web-h2c"] as const) {
    test(`${kind}: a success, and an error with its ErrorInfo`, async () => {
      const t = testTransport(kind, srv.url);
      try {
        const client = createClient(GroupsService, t.transport);
        const org = await client.createGroup({ parent: "", group: { name: `${kind} org` } });
        assert.equal((await client.getGroup({ uid: org.uid })).name, `${kind} org`);
        const err = await connectError(client.getGroup({ uid: MISSING }));
        assert.equal(err.code, Code.NotFound);
        assert.deepEqual(
          err.findDetails(ErrorInfoSchema).map((i) => [i.reason, i.domain]),
          [["NOT_FOUND", "iam.platform.api"]],
        );
      } finally {
        t.close();
      }
    });
  }

  test("Health/Watch as a Connect server stream", async () => {
    const t = testTransport("connect-h2c", srv.url);
    const abort = new AbortController();
    try {
      const client = createClient(Health, t.transport);
      for await (const answer of client.watch({ service: "" }, { signal: abort.signal })) {
        assert.equal(answer.status, ServingStatus.SERVING);
        break;
      }
    } finally {
      abort.abort();
      t.close();
    }
  });

  test("gRPC-Web text mode: a success and an error, base64 frames on a raw HTTP/2 stream", async () => {
    await onH2c(async (session) => {
      const call = async (uid: string) => {
        const message = toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid }));
        const answer = await h2Request(
          session,
          { ":method": "POST", ":path": `${GROUPS}/GetGroup`, "content-type": "application/grpc-web-text", "x-grpc-web": "1" },
          [frame(0, message).toString("base64")],
        );
        assert.equal(answer.status, 200);
        assert.match(String(answer.headers["content-type"]), /^application\/grpc-web-text/);
        return parseFrames(Buffer.from(answer.body.toString("latin1"), "base64"));
      };
      const created = await h2Request(session, { ":method": "POST", ":path": "/iam/v2beta1/groups", "content-type": "application/json" }, [
        JSON.stringify({ name: "text org" }),
      ]);
      const ok = await call(json(created).uid);
      assert.equal(ok.trailers.get("grpc-status"), "0");
      assert.equal(fromBinary(GroupSchema, ok.messages[0]!).name, "text org");
      const missing = await call(MISSING);
      assert.equal(missing.trailers.get("grpc-status"), String(Code.NotFound));
      const status = fromBinary(StatusSchema, Buffer.from(missing.trailers.get("grpc-status-details-bin")!, "base64"));
      assert.ok(status.details.some((d) => d.typeUrl.endsWith("ErrorInfo")));
    });
  });

  test("gRPC (grpc-js) on the same port: a success and an error with grpc-status-details-bin", async () => {
    const client = grpcClient(GroupsService, srv.port);
    try {
      const org = await client.call("createGroup", { parent: "", group: { name: "grpc org" } });
      assert.equal((await client.call("getGroup", { uid: org.uid })).name, "grpc org");
      const err = (await client.call("getGroup", { uid: MISSING }).catch((e: unknown) => e)) as grpc.ServiceError;
      assert.equal(err.code, Code.NotFound);
      assert.equal(grpcStatus(err).details[0]?.$typeName, "google.rpc.ErrorInfo");
    } finally {
      client.close();
    }
  });
});

describe("a 415 always carries a body", () => {
  /** The Connect error JSON of a 415 on a Connect route: INVALID_ARGUMENT, BadRequest naming Content-Type. */
  function assertConnect415(status: number, body: Buffer): void {
    assert.equal(status, 415);
    const err = errorFromJsonBytes(body, undefined, new Error("no error body") as never);
    assert.equal(err.code, Code.InvalidArgument);
    assert.deepEqual(
      err.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations.map((v) => v.field)),
      ["Content-Type"],
    );
    assert.equal(err.findDetails(ErrorInfoSchema)[0]?.reason, "INVALID_ARGUMENT");
  }

  test("REST and Connect routes, over HTTP/1.1 and h2c, and a type grpc-js would take (application/grpc-foo)", async () => {
    await onH2c(async (session) => {
      for (const type of ["text/plain", "application/xml", "application/grpc-foo"]) {
        const h1 = await fetch(`${srv.url}${GROUPS}/GetGroup`, { method: "POST", headers: { "content-type": type }, body: "{}" });
        assertConnect415(h1.status, Buffer.from(await h1.arrayBuffer()));
        const h2 = await h2Request(session, { ":method": "POST", ":path": `${GROUPS}/GetGroup`, "content-type": type }, ["{}"]);
        assertConnect415(h2.status, h2.body);
      }
      const h1 = await fetch(`${srv.url}/iam/v2beta1/groups`, {
        method: "POST",
        headers: { "content-type": "text/xml", authorization: `Bearer ${srv.adminToken}` },
        body: "<x/>",
      });
      assert.equal(h1.status, 415);
      const h2 = await h2Request(session, { ":method": "POST", ":path": "/iam/v2beta1/groups", "content-type": "text/xml" }, ["<x/>"]);
      assert.equal(h2.status, 415);
      assert.deepEqual(json(h2), await h1.json());
      assert.deepEqual(restError(json(h2)), { reason: "INVALID_ARGUMENT", fields: ["Content-Type"] });
    });
  });
});

describe("bodies over their limit on h2c are refused without being read", () => {
  test("REST with a token: 64 MiB is 413 after at most the 4 MiB limit, and the stream is reset", async () => {
    await onH2c(async (session) => {
      const out = await h2Request(session, { ":method": "POST", ":path": "/iam/v2beta1/groups", "content-type": "application/json" }, [
        '{"name":"',
        ...repeated(1024, 64 * KiB),
      ]);
      assert.equal(out.status, 413);
      assert.equal(restError(json(out)).reason, "BODY_TOO_LARGE");
      assert.ok(out.reset, "the rest of the body is refused: RST_STREAM after the answer (RFC 9113 §8.1)");
      assert.ok(out.serverRead < 4 * MiB + SLACK, `the server read ${out.serverRead} bytes`);
      // The connection goes on serving.
      assert.equal((await h2Request(session, { ":path": "/healthz" })).status, 200);
    });
  });

  test("without a token: 64 MiB to a token-only route is 401 before the body is read", async () => {
    await onH2c(async (session) => {
      const out = await h2Request(
        session,
        { ":method": "POST", ":path": "/iam/v2beta1/groups", "content-type": "application/json", authorization: "" },
        repeated(1024, 64 * KiB),
      );
      assert.equal(out.status, 401);
      assert.equal(restError(json(out)).reason, "UNAUTHENTICATED");
      assert.ok(out.reset);
      assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} bytes`);
    });
  });

  test("a route that needs no token (token exchange) reads at most 64 KiB: REST 413, Connect RESOURCE_EXHAUSTED", async () => {
    await onH2c(async (session) => {
      const rest = await h2Request(
        session,
        { ":method": "POST", ":path": "/sts/exchange", "content-type": "application/x-www-form-urlencoded", authorization: "" },
        ["aud=", ...repeated(1024, 64 * KiB)],
      );
      assert.equal(rest.status, 413);
      assert.match(json(rest).message, /65536 bytes/);
      const connect = await h2Request(
        session,
        {
          ":method": "POST",
          ":path": "/platformapi.oidc.v1.SecurityTokenService/Exchange",
          "content-type": "application/json",
          authorization: "",
        },
        ['{"aud":["', ...repeated(1024, 64 * KiB)],
      );
      assert.equal(connect.status, 429);
      assert.equal(errorFromJsonBytes(connect.body, undefined, new Error("no body") as never).code, Code.ResourceExhausted);
      assert.ok(connect.serverRead < SLACK, `the server read ${connect.serverRead} bytes`);
    });
  });
});

test("one h2c connection carries gRPC and REST streams at once", async () => {
  await onH2c(async (session) => {
    const message = toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: MISSING }));
    const grpcCall = () =>
      h2Request(session, { ":method": "POST", ":path": `${GROUPS}/GetGroup`, "content-type": "application/grpc", te: "trailers" }, [
        frame(0, message),
      ]);
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? grpcCall() : h2Request(session, { ":path": `/iam/v2beta1/groups/${MISSING}` }))),
    );
    for (const [i, answer] of answers.entries()) {
      assert.equal(answer.status, i % 2 === 0 ? 200 : 404);
      if (i % 2 === 1) assert.equal(restError(json(answer)).reason, "NOT_FOUND");
      else assert.match(String(answer.headers["content-type"]), /^application\/grpc/);
    }
  });
});

test("REST bodies on HTTP/2 count against the per-address unfinished-bytes budget, as gRPC messages do", async () => {
  // One 60 KiB body held open takes most of a 64 KiB + 5 budget per address; a second one is refused.
  const small = await startTestServer({
    env: {
      PLATFORM_MAX_MESSAGE_BYTES: String(64 * KiB),
      PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS: String(64 * KiB + 5),
      ...METRICS_ENV,
    },
  });
  const session = http2.connect(small.url);
  session.on("error", () => {});
  const post = () =>
    session.request({
      ":method": "POST",
      ":path": "/iam/v2beta1/groups",
      "content-type": "application/json",
      authorization: `Bearer ${small.adminToken}`,
    });
  try {
    const held = post();
    held.on("error", () => {});
    held.write(Buffer.alloc(60 * KiB, "a"));
    // Wait until the server holds it (the gauge is read at each scrape).
    for (;;) {
      const text = await scrapeMetrics(small.url);
      if (Number(/^platform_pending_request_bytes (\d+)/m.exec(text)?.[1] ?? 0) >= 60 * KiB) break;
    }
    const refused = post();
    refused.end(Buffer.alloc(10 * KiB, "a"));
    const [headers] = (await within(30_000, once(refused, "response"), "refusal")) as [http2.IncomingHttpHeaders];
    const parts: Buffer[] = [];
    for await (const chunk of refused) parts.push(chunk as Buffer);
    assert.equal(headers[":status"], 429);
    const body = JSON.parse(Buffer.concat(parts).toString());
    assert.equal(restError(body).reason, "ADDRESS_BUDGET_EXCEEDED");
    held.close();
  } finally {
    session.destroy();
    await small.close();
  }
});

test("a REST body left open on HTTP/2 is reset at the request timeout, and the connection goes on serving", async () => {
  const short = await startTestServer({ timeouts: { firstBytes: 10_000, keepAlive: 500, headers: 1_000, request: 1_000 } });
  const session = http2.connect(short.url);
  session.on("error", () => {});
  try {
    const open = session.request({
      ":method": "POST",
      ":path": "/iam/v2beta1/groups",
      "content-type": "application/json",
      authorization: `Bearer ${short.adminToken}`,
    });
    open.on("error", () => {});
    open.write('{"name":');
    await within(30_000, once(open, "close"), "the reset");
    assert.equal(open.rstCode, http2.constants.NGHTTP2_CANCEL);
    const health = session.request({ ":path": "/healthz" });
    const [headers] = (await within(30_000, once(health, "response"), "healthz")) as [http2.IncomingHttpHeaders];
    assert.equal(headers[":status"], 200);
    health.resume();
  } finally {
    session.destroy();
    await short.close();
  }
});
