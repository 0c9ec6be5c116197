/** `platform-api registry-reconcile`: repairs the catalogue from the registry's own listing (docs/registry-catalogue.md). */
import { randomUUID } from "node:crypto";
import { createRegistry, type DescMessage } from "@bufbuild/protobuf";
import type { Config } from "../config.js";
import type { Store } from "../store/store.js";
import { parseCommandArgs, UsageError } from "./args.js";
import type { Command } from "./command.js";
import { STORE_ENVIRONMENT, withCommandStore } from "./environment.js";

const USAGE =
  "usage: platform-api registry-reconcile --registry <url> [--token <registry token>] [--max-repos <n>] [--page-size <n>] [--timeout-ms <ms>]";

interface ReconcileArgs {
  registry: string;
  token: string | null;
  maxRepos: number;
  pageSize: number;
  timeoutMs: number;
}

function count(values: Record<string, unknown>, name: string, fallback: number, max: number): number {
  const text = values[name] as string | undefined;
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1 || n > max) throw new UsageError(`--${name} ${text}: must be a whole number from 1 to ${max}`, USAGE);
  return n;
}

/** The arguments, or a UsageError saying what is wrong with them. */
function reconcileArgs(args: string[]): ReconcileArgs {
  const { values } = parseCommandArgs(args, USAGE, {
    registry: { type: "string" },
    token: { type: "string" },
    "max-repos": { type: "string" },
    "page-size": { type: "string" },
    "timeout-ms": { type: "string" },
  });
  const registry = (values.registry as string | undefined) ?? "";
  if (registry === "") throw new UsageError("--registry <url> is required", USAGE);
  let url: URL;
  try {
    url = new URL(registry);
  } catch {
    throw new UsageError(`--registry ${registry}: not a URL`, USAGE);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new UsageError(`--registry ${registry}: must be http or https`, USAGE);
  return {
    registry: url.origin,
    token: (values.token as string | undefined) ?? null,
    maxRepos: count(values, "max-repos", 10_000, 1_000_000),
    pageSize: count(values, "page-size", 100, 1000),
    timeoutMs: count(values, "timeout-ms", 10_000, 600_000),
  };
}

/** The event deps a command needs to write events as the server does (the feed's own cursors, the REST JSON of messages). */
async function commandEventDeps(store: Store, cfg: Config) {
  const [{ CONTRACT_FILES }, { responseJson }, { FeedCursors }, { createFeedNotifier }] = await Promise.all([
    import("../services/index.js"),
    import("../codec/json.js"),
    import("../services/events/feed-cursor.js"),
    import("../services/events/watch.js"),
  ]);
  const registry = createRegistry(...CONTRACT_FILES);
  return {
    json: (schema: DescMessage, message: unknown) => responseJson(schema, message, registry),
    source: cfg.baseUrl,
    cursors: await FeedCursors.open(store.keys),
    retentionMs: cfg.eventRetentionMs,
    // Nothing watches in this process: the server's watches and deliveries find the events by polling.
    watch: { notifier: createFeedNotifier() },
  };
}

export const registryReconcileCommand: Command = {
  summary: "repair the registry catalogue (repos, tags) from what the registry holds",
  help: `${USAGE}

Walks the registry's /v2/_catalog and each repository's tags (paged, --page-size entries a page, default 100), resolves each tag's digest (HEAD of its manifest), and repairs the catalogue of every repository that maps to an organization ("<org uid>/<repo name>"): a missing repo is created, missing tags created, moved tags updated, and tags the registry no longer has removed, each with its event in the feed (actor "registry-reconcile"). Repositories beyond --max-repos (default 10000) wait for the next run; each registry request times out after --timeout-ms (default 10000). The registry requests carry a registry token this command signs with the server's signing key (issuer PLATFORM_REGISTRY_ISSUER, service PLATFORM_REGISTRY_SERVICE), or --token's. Prints a summary; exits 0, 1 when the registry cannot be read (nothing after the failure is repaired), 2 on usage errors. ${STORE_ENVIRONMENT}`,
  async run(args) {
    const opts = reconcileArgs(args);
    return withCommandStore(async (store, cfg) => {
      const [{ reconcileCatalogue }, { createRegistryClient, RegistryReadError }, { RegistryKeys }, { signRegistryToken }] =
        await Promise.all([
          import("../registry/reconcile.js"),
          import("../registry/reconcile-client.js"),
          import("../registry/keys.js"),
          import("../registry/token.js"),
        ]);
      const keys = new RegistryKeys(store.keys, () => 0);
      const client = createRegistryClient({
        url: opts.registry,
        pageSize: opts.pageSize,
        timeoutMs: opts.timeoutMs,
        token: async (scope) =>
          opts.token ??
          (
            await signRegistryToken(
              keys,
              { issuer: cfg.registry.issuer, service: cfg.registry.service, subject: "registry-reconcile", access: [scope] },
              Date.now(),
            )
          ).token,
      });
      const deps = { store, now: Date.now, events: await commandEventDeps(store, cfg) };
      try {
        const s = await reconcileCatalogue(deps, client, { maxRepos: opts.maxRepos, maxTagsPerRepo: 10_000, requestId: randomUUID() });
        process.stdout.write(
          `repositories: ${s.repositories}${s.truncated ? ` (stopped at --max-repos ${opts.maxRepos})` : ""}\n` +
            `unmapped: ${s.unmapped}\nrepos created: ${s.reposCreated}\ntags created or moved: ${s.tagsCreatedOrMoved}\n` +
            `tags removed: ${s.tagsRemoved}\ntags unchanged: ${s.tagsUnchanged}\n`,
        );
        return 0;
      } catch (err) {
        if (!(err instanceof RegistryReadError)) throw err;
        process.stderr.write(`registry-reconcile: ${err.message}\n`);
        return 1;
      }
    });
  },
};
