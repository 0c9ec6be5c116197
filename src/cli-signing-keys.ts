/**
 * The commands that manage the keys signing this server's API tokens, in
 * the store every server process reads: rotate-key adds a key (and may
 * retire one in the same transaction), retire-key retires one now,
 * list-keys shows where each is in its life. Running servers notice a
 * change at their next request (the store's versions move with it).
 */
import { keyStatuses, ROTATED_KEY_HORIZON_MS, type KeyStatus } from "./auth/key-lifecycle.js";
import { newSigningKey } from "./auth/tokens.js";
import type { Command } from "./cli.js";
import { FailedPreconditionError, NotFoundError } from "./domain/errors.js";
import type { Store } from "./store/store.js";

const HORIZON = `${ROTATED_KEY_HORIZON_MS / 60_000} minutes`;
const ROTATE_USAGE = "usage: platform-api rotate-key [--retire <kid>]";
const RETIRE_USAGE = "usage: platform-api retire-key <kid>";

/** What went wrong, on stderr: exit code 1 for a refusal by the store, 2 for a usage error. */
function fail(message: string, code: 1 | 2): number {
  process.stderr.write(`${message}\n`);
  return code;
}

/** A refusal of retireSigningKey as one line, or undefined for anything else (rethrown). */
function retireRefusal(err: unknown, kid: string): string | undefined {
  if (err instanceof NotFoundError) return `no signing key has kid ${JSON.stringify(kid)}`;
  if (err instanceof FailedPreconditionError) return err.preconditionViolations[0]?.description ?? err.message;
  return undefined;
}

/** One line of list-keys: kid, state, and the times that matter for it. */
function describe(status: KeyStatus): string {
  const at = (ms: number) => new Date(ms).toISOString();
  const created = `created ${at(status.record.createTime)}`;
  switch (status.state) {
    case "signing":
      return `${status.record.kid} signing ${created}`;
    case "retired":
      return `${status.record.kid} retired ${created}, retired ${at(status.record.retireTime!)}`;
    default:
      return `${status.record.kid} ${status.state} ${created}, verifies until ${at(status.verifiesUntil)}`;
  }
}

/** The three commands over the store open() opens (with the server's environment). */
export function signingKeyCommands(open: () => Promise<Store>, environment: string): Record<string, Command> {
  const withStore = async (fn: (store: Store) => Promise<number>): Promise<number> => {
    const store = await open();
    try {
      return await fn(store);
    } finally {
      await store.close();
    }
  };
  return {
    "rotate-key": {
      summary: "add a new token-signing key (and retire a compromised one with --retire)",
      help: `${ROTATE_USAGE}

Adds a new signing key. New tokens are signed with it, by running servers from their next request. Tokens signed by the previous key keep verifying until they expire; the previous key verifies nothing ${HORIZON} after this (one token lifetime and a minute) and leaves /.well-known/jwks.json then. With --retire <kid>, the key <kid> (the current one, if it leaked) is retired in the same transaction: its tokens are refused from every server's next request. Prints "added signing key <kid>" (and "retired signing key <kid>"). Exits 0 when done, 1 when <kid> is no key (nothing is changed), 2 on usage errors. ${environment}`,
      async run(args) {
        if (args.length !== 0 && (args.length !== 2 || args[0] !== "--retire" || args[1] === "")) return fail(ROTATE_USAGE, 2);
        const retire = args[1];
        return withStore(async (store) => {
          const key = await newSigningKey(await store.keys.signingKeys(), Date.now());
          try {
            await store.transaction(async (tx) => {
              await tx.keys.addSigningKey(key);
              if (retire !== undefined) await tx.keys.retireSigningKey(retire, Date.now());
            });
          } catch (err) {
            const refusal = retireRefusal(err, retire!);
            if (refusal === undefined) throw err;
            return fail(`${refusal}; nothing was changed`, 1);
          }
          process.stdout.write(`added signing key ${key.kid}\n${retire === undefined ? "" : `retired signing key ${retire}\n`}`);
          return 0;
        });
      },
    },
    "retire-key": {
      summary: "retire a token-signing key now: its tokens stop verifying",
      help: `${RETIRE_USAGE}

Retires the signing key <kid> now: every server refuses its tokens from its next request (401, "signed by a retired signing key"), it leaves /.well-known/jwks.json, it never signs again, and its private half is erased. The newest key, the one that signs, cannot be retired this way: use \`platform-api rotate-key --retire <kid>\`, which adds its successor in the same step. \`platform-api list-keys\` shows the kids. Exits 0 when retired (or retired already), 1 when <kid> is no key or is the newest, 2 on usage errors. ${environment}`,
      async run(args) {
        // A kid is base64url and may begin with "-": whatever the one argument is, it names the key.
        if (args.length !== 1 || args[0] === "") return fail(RETIRE_USAGE, 2);
        const kid = args[0]!;
        return withStore(async (store) => {
          let outcome: string;
          try {
            outcome = await store.keys.retireSigningKey(kid, Date.now());
          } catch (err) {
            const refusal = retireRefusal(err, kid);
            if (refusal === undefined) throw err;
            return fail(refusal, 1);
          }
          process.stdout.write(outcome === "retired" ? `retired signing key ${kid}\n` : `signing key ${kid} was retired already\n`);
          return 0;
        });
      },
    },
    "list-keys": {
      summary: "list the token-signing keys and where each is in its life",
      help: `usage: platform-api list-keys

Prints one line per signing key, oldest first: its kid, its state — signing (the newest key), rotated-out (a newer key signs; its tokens verify until the time shown), past-horizon (it verifies nothing any more) or retired — and its times. The kid of a token is in its header. ${environment}`,
      async run(args) {
        if (args.length !== 0) return fail("usage: platform-api list-keys", 2);
        return withStore(async (store) => {
          const lines = keyStatuses(await store.keys.signingKeys(), Date.now()).map(describe);
          process.stdout.write(lines.map((line) => `${line}\n`).join(""));
          return 0;
        });
      },
    },
  };
}
