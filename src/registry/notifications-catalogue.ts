/**
 * The registry's changes applied to the catalogue: a manifest pushed by tag
 * creates the repo (first push) and creates or moves the tag; a manifest
 * deleted removes the tags at its digest. Both the notification endpoint
 * (notifications-route.ts) and the reconcile (reconcile.ts) write through
 * here, in one transaction per change with the change's CloudEvents
 * (withEvents), as API mutations do. Every change carries the time the
 * registry made it (microseconds): the tag store keeps it per tag and ignores
 * older changes, so redeliveries and late deliveries never regress a tag.
 */
import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import { RepoSchema } from "../../gen/platformapi/registry/v2beta1/repos_pb.js";
import { TagSchema, TagsService } from "../../gen/platformapi/registry/v2beta1/tags_pb.js";
import { requestIdKey } from "../auth/principal.js";
import { AlreadyExistsError, NotFoundError } from "../domain/errors.js";
import { newChildUid } from "../domain/uidp.js";
import { lightContext } from "../server/context.js";
import { withEvents, type Change, type EventDeps } from "../services/events.js";
import { repoMessage } from "../services/registry/repos.js";
import { tagMessage } from "../services/registry/tags.js";
import type { RepoRecord, Store, TagRecord } from "../store/store.js";
import { findRepo, type RegistryRepository } from "./mapping.js";

/** What the catalogue writer needs: the store, the clock and how events are written (ServiceDeps has all three). */
export interface CatalogueDeps {
  store: Store;
  now: () => number;
  events: EventDeps;
}

/** What one registry change did to the catalogue. */
export type CatalogueOutcome =
  /** The change was applied (a repo or tag created, a tag moved or deleted). */
  | "applied"
  /** Nothing to change: a redelivery, an older change than what set the tag, or a delete of nothing tagged. */
  | "unchanged"
  /** The path's organization does not exist. */
  | "unmapped";

/** Who a change is attributed to, and the request it came in with (the events' actor and requestId). */
export interface ChangeOrigin {
  actor: string;
  requestId: string;
}

/** Writes the registry's changes to the catalogue, with their events. */
export interface RegistryCatalogue {
  /** The tag was pushed (or found by a reconcile) at digest, at timeUs. */
  tagPushed(where: RegistryRepository, tag: string, digest: string, timeUs: number, origin: ChangeOrigin): Promise<CatalogueOutcome>;
  /** The tags the selector names (at a digest: a manifest deleted; or by name) are gone since timeUs. */
  tagsDeleted(
    where: RegistryRepository,
    which: { digest: string } | { name: string },
    timeUs: number,
    origin: ChangeOrigin,
  ): Promise<CatalogueOutcome>;
}

/**
 * The context the events of a registry change are written under: withEvents
 * reads the request id from it (the actor is set on each change). The
 * changes are the tags service's in effect, so its descriptor names the call.
 */
function originContext(origin: ChangeOrigin): HandlerContext {
  return lightContext({
    service: TagsService,
    method: TagsService.method.createTag,
    protocolName: "registry",
    requestMethod: "POST",
    url: "/registry/notifications",
    requestHeader: new Headers(),
    values: createContextValues().set(requestIdKey, origin.requestId),
  });
}

/** Creates the writer of registry changes over the deps' store. */
export function createRegistryCatalogue(deps: CatalogueDeps): RegistryCatalogue {
  /** One push in one transaction: the repo if new, then the tag if this change supersedes what set it. */
  async function push(where: RegistryRepository, name: string, digest: string, timeUs: number, origin: ChangeOrigin) {
    const actor = origin.actor;
    return withEvents(
      deps,
      originContext(origin),
      async (tx) => {
        let repo = await findRepo(tx, where);
        let createdRepo: RepoRecord | null = null;
        if (repo === null) {
          if (!(await tx.groups.get(where.orgUid))) return null;
          const now = deps.now();
          createdRepo = repo = {
            uid: newChildUid(where.orgUid),
            parentUid: where.orgUid,
            name: where.name,
            description: "",
            catalogTier: 0,
            bundles: [],
            aliases: [],
            activeTags: [],
            createTime: now,
            updateTime: now,
          };
          await tx.repos.create(repo);
        }
        const record: TagRecord = {
          uid: newChildUid(repo.uid),
          repoUid: repo.uid,
          name,
          digest,
          deprecated: false,
          bundles: [],
          updateTime: deps.now(),
        };
        return { createdRepo, tag: await tx.tags.putFromRegistry(record, timeUs) };
      },
      (result) => {
        const changes: Change<typeof RepoSchema | typeof TagSchema>[] = [];
        if (result?.createdRepo) {
          const r = result.createdRepo;
          changes.push({
            kind: "repo",
            action: "created",
            subject: r.uid,
            actor,
            resource: { schema: RepoSchema, message: repoMessage(r) },
          });
        }
        if (result?.tag) {
          const { tag, created } = result.tag;
          // A tag belongs to its repo's group: that is where tag.list decides who sees it.
          changes.push({
            kind: "tag",
            action: created ? "created" : "updated",
            subject: tag.uid,
            groupUid: where.orgUid,
            actor,
            resource: { schema: TagSchema, message: tagMessage(tag) },
          });
        }
        return changes;
      },
    );
  }

  return {
    async tagPushed(where, name, digest, timeUs, origin) {
      let result: Awaited<ReturnType<typeof push>>;
      try {
        result = await push(where, name, digest, timeUs, origin);
      } catch (err) {
        // Another delivery created the repo first: this one now finds it.
        if (err instanceof AlreadyExistsError) result = await push(where, name, digest, timeUs, origin);
        // The organization went away meanwhile.
        else if (err instanceof NotFoundError) return "unmapped";
        else throw err;
      }
      if (result === null) return "unmapped";
      return result.createdRepo || result.tag ? "applied" : "unchanged";
    },

    async tagsDeleted(where, which, timeUs, origin) {
      const deleted = await withEvents(
        deps,
        originContext(origin),
        async (tx) => {
          const repo = await findRepo(tx, where);
          return repo === null ? [] : tx.tags.deleteFromRegistry(repo.uid, which, timeUs);
        },
        (tags) =>
          tags.map((t) => ({
            kind: "tag" as const,
            action: "deleted" as const,
            subject: t.uid,
            groupUid: where.orgUid,
            actor: origin.actor,
          })),
      );
      return deleted.length > 0 ? "applied" : "unchanged";
    },
  };
}
