import { Readable } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply } from "fastify";
import { ApiError, invalidField } from "../../domain/errors.js";
import { DEFAULT_ERROR_DOMAIN, restErrorBody, retryAfterSeconds, toConnectError } from "../errors.js";
import { REQUEST_CODINGS, requestCoding } from "../http/compression.js";
import { HeaderView } from "../http/header-view.js";
import { bearerChallenge } from "../http/www-authenticate.js";
import { admittedValues, installRestAdmission, type RestBodyLimits } from "./body-admission.js";
import { NDJSON_TYPE } from "./stream.js";
import { RouteNotFoundError, type RestTranscoder } from "./transcoder.js";

declare module "fastify" {
  interface FastifyInstance {
    /** ErrorInfo.domain of an error on a request to method and url (RestTranscoder.errorDomainFor). */
    errorDomainFor?: (method: string, url: string) => string;
  }
}

/**
 * Answers err in the spec's REST error shape (one ErrorInfo, the status its
 * code maps to unless status is given), with a bearer challenge on a 401.
 */
export function sendError(reply: FastifyReply, err: unknown, status?: number): FastifyReply {
  // Whatever refused it (body parser, size limit, the service), a request to a route answers in its service's domain.
  const domain = reply.server.errorDomainFor?.(reply.request.method, reply.request.url) ?? DEFAULT_ERROR_DOMAIN;
  const mapped = toConnectError(err, domain, (e) => reply.log.error({ err: e }, "internal error"));
  const rendered = restErrorBody(mapped);
  const code = status ?? rendered.status;
  const retryAfter = retryAfterSeconds(mapped);
  if (retryAfter !== undefined) reply.header("retry-after", String(retryAfter));
  if (code === 401 && !reply.hasHeader("www-authenticate"))
    reply.header("www-authenticate", bearerChallenge(reply.request.headers.authorization));
  return reply.code(code).type("application/json").send(rendered.body);
}

/** The REST side: admission, JSON and form parsing, the generic transcoder route, and error rendering. */
export function installRest(app: FastifyInstance, transcoder: RestTranscoder, limits: RestBodyLimits): void {
  app.decorate("errorDomainFor", (method: string, url: string) => transcoder.errorDomainFor(method, url));
  // Our parsers live in their own scope: the Connect plugin registers its own.
  void app.register(async (scope) => installTranscoderRoute(scope, transcoder, limits));
  installErrorHandlers(app, limits.bodyLimit);
}

function installTranscoderRoute(app: FastifyInstance, transcoder: RestTranscoder, limits: RestBodyLimits): void {
  // A body in a coding we cannot read would only fail as "not valid JSON": say what is wrong before reading it.
  app.addHook("onRequest", async (req, reply) => {
    if (requestCoding(req.headers["content-encoding"]) !== "unsupported") return;
    const accepted = REQUEST_CODINGS.join(", ");
    const coding = String(req.headers["content-encoding"]).trim().slice(0, 40);
    const err = new ApiError(
      Code.InvalidArgument,
      "UNSUPPORTED_CONTENT_ENCODING",
      `Content-Encoding ${coding} is not supported here: send ${accepted} or no coding`,
    );
    return sendError(reply.header("accept-encoding", accepted), err, 415);
  });
  // The caller is authenticated from the headers before the body is read, which is then limited by route.
  installRestAdmission(app, transcoder, limits);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_req, body, done) => {
    const text = (body as string).trim();
    if (text === "") return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(invalidField("body", "is not valid JSON"));
    }
  });
  app.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string" }, (_req, body, done) => {
    done(null, new URLSearchParams(body as string));
  });

  app.route({
    method: ["GET", "POST", "PUT", "PATCH", "DELETE"],
    url: "/*",
    handler: async (req, reply) => {
      // Unary handlers run to completion against the store; a server stream stops when its client goes away
      // (its signal is made only when a stream asks for it).
      let gone: AbortController | undefined;
      const onClose = () => gone?.abort();
      reply.raw.once("close", onClose);
      try {
        const res = await transcoder.handle({
          requestId: req.id,
          clientAddress: req.clientAddress,
          // HEAD is GET without the body: fastify drops the payload and keeps its length and type.
          method: req.method === "HEAD" ? "GET" : req.method,
          url: req.url,
          headers: HeaderView.ofNode(req.headers),
          body: req.body,
          values: admittedValues(req),
          signal: () => (gone ??= new AbortController()).signal,
        });
        res.headers?.forEach((value, key) => void reply.header(key, value));
        if (res.lines === undefined) {
          reply.raw.off("close", onClose);
          return reply.code(res.status).type("application/json").send(res.body);
        }
        // Piped with backpressure: the next line is asked for only once the socket took the last ones.
        return reply.code(res.status).type(NDJSON_TYPE).header("cache-control", "no-store").send(Readable.from(res.lines));
      } catch (err) {
        reply.raw.off("close", onClose);
        if (err instanceof RouteNotFoundError) return notFound(reply, req.method, err.allowed);
        return sendError(reply, err);
      }
    },
  });
}

function installErrorHandlers(app: FastifyInstance, bodyLimit: number): void {
  app.setNotFoundHandler((req, reply) => notFound(reply, req.method, []));
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string; limit?: number }, req, reply) => {
    if (err instanceof ApiError || err instanceof ConnectError) return sendError(reply, err);
    const status = err.statusCode ?? 500;
    if (status === 413) {
      // The rest of a body over the limit is not read: the connection ends with the answer.
      if (!req.raw.complete) reply.header("connection", "close");
      const limit = err.limit ?? bodyLimit;
      return sendError(reply, new ApiError(Code.ResourceExhausted, "BODY_TOO_LARGE", `Request body exceeds ${limit} bytes`), 413);
    }
    if (status === 415) return sendError(reply, invalidField("Content-Type", "must be application/json"), 415);
    if (status >= 400 && status < 500) return sendError(reply, invalidField("request", "is malformed"), status);
    return sendError(reply, err);
  });
}

function notFound(reply: FastifyReply, method: string, routeMethods: string[]): FastifyReply {
  const allowed = routeMethods.includes("GET") ? [...routeMethods, "HEAD"] : routeMethods;
  if (allowed.length > 0) {
    reply.header("allow", allowed.join(", "));
    return sendError(
      reply,
      new ApiError(Code.Unimplemented, "METHOD_NOT_ALLOWED", `Method ${method} is not allowed here; use ${allowed.join(" or ")}`),
      405,
    );
  }
  return sendError(reply, new ApiError(Code.NotFound, "ROUTE_NOT_FOUND", "No such route"));
}
