// The benchmark's ceilings, each in a process of its own so the load generator never shares an event loop with it.
// Plain JavaScript run by plain node (`node bench/ceilings.mjs …`, no tsx, no --import): fastify and grpc-js
// loaded through tsx's module hooks cost about a third more CPU per request (≈25 µs against ≈18 µs for the same
// fastify route on the same machine), which made the ceiling slow and every ratio to it flattering.
//   http <answer.json>   a bare fastify server: one exact route per path the answer lists, each returning the
//                        same status, headers and body bytes as the API server did for it
//   grpc <answer.json>   a bare @grpc/grpc-js server: one unary method at the answer's path, returning the very
//                        response message bytes (and the response metadata) the API server returned for it
// answer.json: { "routes": [{ "path", "status", "headers": { name: value }, "body": base64 }] } for http,
//              { "path", "message": base64, "metadata": { name: value } } for grpc.
// Prints "PORT <n>" once listening on 127.0.0.1.
/* global process, console, Buffer */
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import Fastify from "fastify";

const [mode, file] = process.argv.slice(2);
const answer = JSON.parse(readFileSync(file ?? "", "utf8"));

if (mode === "http") {
  const app = Fastify({ logger: false });
  for (const route of answer.routes) {
    const body = Buffer.from(route.body, "base64");
    // An exact route, as the API's own router matches this path: no wildcard lookup.
    app.get(route.path, (_req, reply) => reply.code(route.status).headers(route.headers).send(body));
  }
  await app.listen({ port: 0, host: "127.0.0.1" });
  console.log(`PORT ${app.server.address().port}`);
} else if (mode === "grpc") {
  const message = Buffer.from(answer.message, "base64");
  const server = new grpc.Server();
  const passThrough = (bytes) => bytes;
  const method = {
    path: answer.path,
    requestStream: false,
    responseStream: false,
    requestSerialize: passThrough,
    requestDeserialize: passThrough,
    responseSerialize: passThrough,
    responseDeserialize: passThrough,
  };
  server.addService(
    { call: method },
    {
      call(call, callback) {
        const metadata = new grpc.Metadata();
        for (const [name, value] of Object.entries(answer.metadata)) metadata.set(name, value);
        call.sendMetadata(metadata);
        callback(null, message);
      },
    },
  );
  const port = await new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  console.log(`PORT ${port}`);
} else {
  console.error("usage: node bench/ceilings.mjs http|grpc <answer.json>");
  process.exit(2);
}
