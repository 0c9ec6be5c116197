/**
 * POST /registry/notifications: where the registry's notifications endpoint
 * points (docs/registry-catalogue.md). Served only with
 * PLATFORM_REGISTRY_NOTIFY_SECRET set: the registry sends it as
 * `Authorization: Bearer <secret>` (its endpoint `headers`), checked in
 * constant time before the body is read. Answers 200 once every change is
 * committed, 503 when the store is unavailable (the registry retries), and
 * never an error for an event this server cannot place (it is ignored and
 * counted).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { Code } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { ApiError, invalidField } from "../domain/errors.js";
import { bearerChallenge } from "../server/http/www-authenticate.js";
import { createRegistryCatalogue, type CatalogueDeps } from "./notifications-catalogue.js";
import { parseNotification } from "./notifications.js";

export const NOTIFICATIONS_PATH = "/registry/notifications";
/** Distribution's notification content type; plain JSON is read too (a hand-made test, a relay). */
const CONTENT_TYPES = ["application/vnd.docker.distribution.events.v1+json", "application/json"];
/** A notification of MAX_EVENTS_PER_NOTIFICATION events is well below this. */
export const NOTIFICATION_BODY_LIMIT = 1024 * 1024;
/** Who changes are attributed to when the registry names no actor (an anonymous push, or none recorded). */
export const REGISTRY_ACTOR = "registry";

/** True when the Authorization header carries the secret, compared in constant time (over digests, so lengths leak nothing). */
function carriesSecret(authorization: string | undefined, secret: string): boolean {
  const given = /^Bearer (.+)$/i.exec(authorization ?? "")?.[1] ?? "";
  const digest = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(digest(given), digest(secret));
}

/**
 * Installs the route. Without a secret configured it answers 404 NOT_FOUND to
 * every request, before the body: an unconfigured server has no such write
 * path (not 503, which would tell the registry to retry what will never be
 * taken; the registry retries every failure anyway, so the operator sees the
 * 404s in its log).
 */
export function installRegistryNotifications(app: FastifyInstance, deps: CatalogueDeps & { secret: string }): void {
  const catalogue = createRegistryCatalogue(deps);
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(CONTENT_TYPES, { parseAs: "string", bodyLimit: NOTIFICATION_BODY_LIMIT }, (_req, body, done) => {
      try {
        done(null, JSON.parse(body as string));
      } catch {
        done(invalidField("body", "is not valid JSON"));
      }
    });
    scope.post(NOTIFICATIONS_PATH, {
      bodyLimit: NOTIFICATION_BODY_LIMIT,
      onRequest: async (req, reply) => {
        if (deps.secret === "")
          throw new ApiError(
            Code.NotFound,
            "NOT_FOUND",
            "Not found: registry notifications are not enabled (PLATFORM_REGISTRY_NOTIFY_SECRET)",
          );
        if (carriesSecret(req.headers.authorization, deps.secret)) return;
        reply.header("www-authenticate", bearerChallenge(req.headers.authorization, "registry-notifications"));
        throw new ApiError(
          Code.Unauthenticated,
          "UNAUTHENTICATED",
          "Unauthenticated: registry notifications require Authorization: Bearer <secret>",
        );
      },
      handler: async (req, reply) => {
        const parsed = parseNotification(req.body);
        let applied = 0;
        let unchanged = 0;
        const unmapped = [...parsed.unmapped];
        for (const change of parsed.changes) {
          const origin = { actor: change.actor || REGISTRY_ACTOR, requestId: String(req.id) };
          const outcome =
            change.kind === "push"
              ? await catalogue.tagPushed(change.where, change.tag, change.digest, change.timeUs, origin)
              : await catalogue.tagsDeleted(change.where, change.which, change.timeUs, origin);
          if (outcome === "applied") applied++;
          else if (outcome === "unchanged") unchanged++;
          else unmapped.push(change.path);
        }
        if (unmapped.length > 0)
          req.log.debug({ repositories: unmapped.slice(0, 10) }, "registry notification: repositories of no organization ignored");
        return reply.send({ applied, unchanged, ignored: parsed.ignored, unmapped: unmapped.length });
      },
    });
  });
}
