/**
 * The bench's ceilings (bench/ceilings.mjs): what the API server answered,
 * recorded byte for byte, then served by a bare fastify or a bare grpc-js
 * server in a plain node process.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as grpc from "@grpc/grpc-js";

/** A ceiling process and the port it listens on. */
export interface Ceiling {
  child: ChildProcess;
  port: number;
}

/** One recorded HTTP answer: what the ceiling's route for path returns. */
export interface HttpAnswer {
  path: string;
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Headers of the connection or of the framing, which fastify and node write themselves. */
const HOP_HEADERS = new Set(["date", "connection", "keep-alive", "content-length", "transfer-encoding"]);

/**
 * GETs url over HTTP/1.1 as autocannon does (no Accept-Encoding) and records
 * the answer: status, headers but the connection's, and the body's bytes.
 */
export function recordHttpAnswer(url: string, headers: Record<string, string>): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const kept = Object.entries(res.headers).filter(([name]) => !HOP_HEADERS.has(name));
        resolve({
          path: new URL(url).pathname,
          status: res.statusCode ?? 0,
          headers: Object.fromEntries(kept.map(([name, value]) => [name, String(value)])),
          body: Buffer.concat(chunks).toString("base64"),
        });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
  });
}

/** One recorded gRPC answer: the response message's bytes and the response metadata. */
export interface GrpcAnswer {
  path: string;
  message: string;
  metadata: Record<string, string>;
}

/** Calls a unary method with grpc-js as an opaque byte message and records the answer. */
export async function recordGrpcAnswer(port: number, path: string, request: Uint8Array, token: string): Promise<GrpcAnswer> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  const answered: Record<string, string> = {};
  try {
    const message = await new Promise<Buffer>((resolve, reject) => {
      const call = client.makeUnaryRequest(
        path,
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from(request),
        metadata,
        (err, value) => (err || !value ? reject(err ?? new Error(`${path}: no answer`)) : resolve(value)),
      );
      call.on("metadata", (md: grpc.Metadata) => {
        for (const [name, value] of Object.entries(md.getMap())) if (typeof value === "string") answered[name] = value;
      });
    });
    return { path, message: message.toString("base64"), metadata: answered };
  } finally {
    client.close();
  }
}

/** Starts bench/ceilings.mjs under plain node (no tsx: see there why) serving what answerFile holds. */
export function startCeiling(mode: "http" | "grpc", answer: unknown, answerFile: string): Promise<Ceiling> {
  writeFileSync(answerFile, JSON.stringify(answer));
  const child = spawn(process.execPath, [join(import.meta.dirname, "ceilings.mjs"), mode, answerFile], {
    stdio: ["ignore", "pipe", "inherit"],
    // Nothing of the bench's own process (no tsx loader through NODE_OPTIONS) reaches the ceiling.
    env: { PATH: process.env.PATH ?? "" },
  });
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      const m = /^PORT (\d+)$/.exec(line);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.once("exit", (code) => reject(new Error(`the ${mode} ceiling exited with ${code}`)));
  });
}
