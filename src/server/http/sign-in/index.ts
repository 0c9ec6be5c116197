import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { UnavailableError } from "../../../domain/errors.js";
import { installBrowserRoutes } from "./browser-routes.js";
import { BrowserBinding, type SignInDeps } from "./deps.js";
import { installDeviceRoutes } from "./device-routes.js";
import { installOAuthRoutes } from "./oauth-routes.js";
import { sendErrorPage } from "./pages.js";
import { oauthError } from "./token-endpoint.js";

export type { SignInDeps } from "./deps.js";

/** Form bodies the sign-in routes read at most: a token request is a few hundred bytes. */
const MAX_FORM_BYTES = 16 * 1024;

/**
 * People signing in (docs/sign-in.md): the pages (/sign-in, /device), the
 * upstream callback, and the OAuth endpoints of our own clients (/oauth/*,
 * RFC 8414 metadata), in a scope of their own that reads only small form
 * bodies. Whatever goes wrong is answered in the route's own language — an
 * HTML page, or RFC 6749's error JSON on /oauth/* — never the API's error body
 * and never a 500 for a client's mistake.
 */
export function installSignIn(app: FastifyInstance, deps: SignInDeps): void {
  const binding = new BrowserBinding(deps.secureCookies);
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string", bodyLimit: MAX_FORM_BYTES }, (_req, body, done) =>
      done(null, new URLSearchParams(body as string)),
    );
    scope.setErrorHandler((err: Error & { statusCode?: number }, req, reply) => answerError(err, req, reply));
    installBrowserRoutes(scope, deps, binding);
    installDeviceRoutes(scope, deps, binding);
    installOAuthRoutes(scope, deps, binding);
  });
}

/** A request's failure in its route's language: the client's (4xx from fastify) or the server's (logged, without the query). */
function answerError(err: Error & { statusCode?: number }, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const oauth = req.url.startsWith("/oauth/");
  const status = err.statusCode ?? 0;
  if (status >= 400 && status < 500) {
    const what =
      status === 415
        ? "the body must be application/x-www-form-urlencoded"
        : status === 413
          ? "the body is too large"
          : "the request is malformed";
    return oauth
      ? oauthError(reply, status, "invalid_request", what)
      : sendErrorPage(reply, status, `This request cannot be read: ${what}.`);
  }
  if (err instanceof UnavailableError) {
    return oauth
      ? oauthError(reply.header("retry-after", "1"), 503, "temporarily_unavailable", "the server cannot reach its store; retry shortly")
      : sendErrorPage(reply, 503, "The server is briefly unavailable.", "Try again in a moment.");
  }
  req.log.error({ err, reqId: req.id }, "sign-in failed");
  return oauth
    ? oauthError(reply, 500, "server_error", "the server failed; see its log")
    : sendErrorPage(reply, 500, "The server failed.", "Try again later.");
}
