import type http2 from "node:http2";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { grpcPrefix } from "./raw-h2.js";

/** The two names reflection is served under (v1alpha is wire-identical). */
export const REFLECTION_SERVICES = ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"] as const;
export const REFLECTION_PATH = `/${REFLECTION_SERVICES[0]}/ServerReflectionInfo`;

export type ReflectionRequestInit = MessageInitShape<typeof ServerReflectionRequestSchema>;

/** One reflection request as it travels in a gRPC stream: the 5-byte prefix and the message. */
export function reflectionFrame(init: ReflectionRequestInit): Buffer {
  const message = toBinary(ServerReflectionRequestSchema, create(ServerReflectionRequestSchema, init));
  return Buffer.concat([grpcPrefix(message.length), message]);
}

/** The names of the files in a file_descriptor_response, in order; [] for any other answer. */
export function fileNames(res: ServerReflectionResponse): string[] {
  const r = res.messageResponse;
  return r.case === "fileDescriptorResponse" ? r.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b).name) : [];
}

/** One answer of a raw stream, decoded. */
export function decodeAnswer(bytes: Buffer): ServerReflectionResponse {
  return fromBinary(ServerReflectionResponseSchema, bytes);
}

/** A reflection stream through @grpc/grpc-js, as grpcurl's client uses one: one request, then its answer. */
export interface ReflectionStream {
  ask(init: ReflectionRequestInit): Promise<ServerReflectionResponse>;
  /** Settles with the call's error (null when it ended OK). */
  ended: Promise<grpc.ServiceError | null>;
  close(): void;
}

export function reflectionStream(port: number, service: string = REFLECTION_SERVICES[0]): ReflectionStream {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = client.makeBidiStreamRequest(
    `/${service}/ServerReflectionInfo`,
    (m: ReflectionRequestInit) => Buffer.from(toBinary(ServerReflectionRequestSchema, create(ServerReflectionRequestSchema, m))),
    (b: Buffer) => fromBinary(ServerReflectionResponseSchema, b),
  );
  const waiting: ((r: ServerReflectionResponse) => void)[] = [];
  call.on("data", (r: ServerReflectionResponse) => waiting.shift()?.(r));
  const ended = new Promise<grpc.ServiceError | null>((resolve) => {
    call.on("error", (err: grpc.ServiceError) => resolve(err));
    call.on("status", (s: grpc.StatusObject) => s.code === grpc.status.OK && resolve(null));
  });
  return {
    ask(init) {
      const answer = new Promise<ServerReflectionResponse>((resolve, reject) => {
        waiting.push(resolve);
        void ended.then((err) => reject(err ?? new Error("the stream ended without an answer")));
      });
      call.write(init);
      return answer;
    },
    ended,
    close() {
      call.cancel();
      client.close();
    },
  };
}

/** What a raw HTTP/2 reflection stream saw: its answers (undecoded, see decodeAnswer), its gRPC status or reset code. */
export interface RawReflectionResult {
  answers: Buffer[];
  grpcStatus?: string;
  statusDetails?: Buffer;
  rstCode?: number;
}

/**
 * Sends `body` on one reflection stream of session and resolves when the
 * stream closes. With read false the answers are never consumed, so the
 * client's flow-control window closes as it would for a client that stopped
 * reading; `closed` then settles only if the server ends the stream.
 * `sent` settles once the body was handed to the connection.
 */
export function rawReflectionCall(session: http2.ClientHttp2Session, body: Buffer, opts: { read: boolean; end?: boolean }) {
  const req = session.request({ ":method": "POST", ":path": REFLECTION_PATH, "content-type": "application/grpc", te: "trailers" });
  req.on("error", () => {});
  const result: RawReflectionResult = { answers: [] };
  const status = (h: http2.IncomingHttpHeaders) => {
    if (h["grpc-status"] === undefined) return;
    result.grpcStatus = String(h["grpc-status"]);
    const bin = h["grpc-status-details-bin"];
    if (typeof bin === "string") result.statusDetails = Buffer.from(bin, "base64");
  };
  req.on("response", status);
  req.on("trailers", status);
  if (opts.read) {
    let pending = Buffer.alloc(0);
    req.on("data", (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 5 && pending.length >= 5 + pending.readUInt32BE(1)) {
        result.answers.push(pending.subarray(5, 5 + pending.readUInt32BE(1)));
        pending = pending.subarray(5 + pending.readUInt32BE(1));
      }
    });
  }
  const sent = new Promise<void>((resolve) => ((opts.end ?? true) ? req.end(body, () => resolve()) : req.write(body, () => resolve())));
  const closed = new Promise<RawReflectionResult>((resolve) => req.on("close", () => resolve({ ...result, rstCode: req.rstCode })));
  return { req, sent, closed };
}
