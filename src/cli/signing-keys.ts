/**
 * The commands that manage the keys signing this server's API tokens, in
 * the database every server process of a deployment reads: rotate-key adds
 * a key (and may retire one in the same transaction), retire-key retires one
 * now, list-keys shows where each is in its life. Running servers notice a
 * change at their next request (the store's versions move with it).
 */
import { keyStatuses, ROTATED_KEY_HORIZON_MS, type KeyStatus } from "../auth/key-lifecycle.js";
import { newSigningKey } from "../auth/tokens.js";
import { FailedPreconditionError, NotFoundError } from "../domain/errors.js";
import type { RetireOutcome, StoreParts } from "../store/store.js";
import { parseCommandArgs, UsageError } from "./args.js";
import type { Command } from "./command.js";
import { STORE_ENVIRONMENT, withCommandStore } from "./environment.js";

const HORIZON = `${ROTATED_KEY_HORIZON_MS / 60_000} minutes`;
const ROTATE_USAGE = "usage: platform-api rotate-key [--retire <kid>]";
const RETIRE_USAGE = "usage: platform-api retire-key <kid>";
const LIST_USAGE = "usage: platform-api list-keys";

/** A refusal by the store, on stderr; exit code 1. */
function refuse(message: string): number {
  process.stderr.write(`${message}\n`);
  return 1;
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

/**
 * Retires the key, and in the same transaction revokes the refresh tokens of every sign-in begun while it signed
 * (a leaked key may have minted tokens nobody can tell from ours: the people signed in under it sign in again).
 */
async function retireWithRefreshTokens(tx: StoreParts, kid: string): Promise<RetireOutcome> {
  const outcome = await tx.keys.retireSigningKey(kid, Date.now());
  await tx.refreshTokens.revokeKey(kid);
  return outcome;
}

export const rotateKeyCommand: Command = {
  summary: "add a new token-signing key (and retire a compromised one with --retire)",
  help: `${ROTATE_USAGE}

Adds a new signing key. New tokens are signed with it, by running servers from their next request. Tokens signed by the previous key keep verifying until they expire; the previous key verifies nothing ${HORIZON} after this (one token lifetime and a minute) and leaves /.well-known/jwks.json then. With --retire <kid>, the key <kid> (the current one, if it leaked) is retired in the same transaction: its tokens are refused from every server's next request, and the refresh tokens of sign-ins begun while it signed are revoked (those people sign in again). Prints "added signing key <kid>" (and "retired signing key <kid>"). Exits 0 when done, 1 when <kid> is no key (nothing is changed), 2 on usage errors. ${STORE_ENVIRONMENT}`,
  async run(args) {
    // A kid is base64url and may begin with "-": the argument after --retire is the kid, whatever it is.
    const { values } = parseCommandArgs(args, ROTATE_USAGE, { retire: { type: "string" } }, 0, ["retire"]);
    const retire = values.retire as string | undefined;
    if (retire === "") throw new UsageError("--retire needs a kid", ROTATE_USAGE);
    return withCommandStore(async (store) => {
      const key = await newSigningKey(await store.keys.signingKeys(), Date.now());
      try {
        await store.transaction(async (tx) => {
          await tx.keys.addSigningKey(key);
          if (retire !== undefined) await retireWithRefreshTokens(tx, retire);
        });
      } catch (err) {
        const refusal = retireRefusal(err, retire!);
        if (refusal === undefined) throw err;
        return refuse(`${refusal}; nothing was changed`);
      }
      process.stdout.write(`added signing key ${key.kid}\n${retire === undefined ? "" : `retired signing key ${retire}\n`}`);
      return 0;
    });
  },
};

export const retireKeyCommand: Command = {
  summary: "retire a token-signing key now: its tokens stop verifying",
  help: `${RETIRE_USAGE}

Retires the signing key <kid> now: every server refuses its tokens from its next request (401, "signed by a retired signing key"), it leaves /.well-known/jwks.json, it never signs again, its private half is erased, and the refresh tokens of sign-ins begun while it signed are revoked (those people sign in again). The newest key, the one that signs, cannot be retired this way: use \`platform-api rotate-key --retire <kid>\`, which adds its successor in the same step. \`platform-api list-keys\` shows the kids. Exits 0 when retired (or retired already), 1 when <kid> is no key or is the newest, 2 on usage errors. ${STORE_ENVIRONMENT}`,
  async run(args) {
    // A kid is base64url and may begin with "-": one argument alone is the kid, whatever it is.
    const { positionals } = parseCommandArgs(args.length === 1 ? ["--", ...args] : args, RETIRE_USAGE, {}, 1);
    const kid = positionals[0];
    if (kid === undefined || kid === "") throw new UsageError("give the kid of the key to retire", RETIRE_USAGE);
    return withCommandStore(async (store) => {
      let outcome: string;
      try {
        outcome = await store.transaction((tx) => retireWithRefreshTokens(tx, kid));
      } catch (err) {
        const refusal = retireRefusal(err, kid);
        if (refusal === undefined) throw err;
        return refuse(refusal);
      }
      process.stdout.write(outcome === "retired" ? `retired signing key ${kid}\n` : `signing key ${kid} was retired already\n`);
      return 0;
    });
  },
};

export const listKeysCommand: Command = {
  summary: "list the token-signing keys and where each is in its life",
  help: `${LIST_USAGE}

Prints one line per signing key, oldest first: its kid, its state — signing (the newest key), rotated-out (a newer key signs; its tokens verify until the time shown), past-horizon (it verifies nothing any more) or retired — and its times. The kid of a token is in its header. ${STORE_ENVIRONMENT}`,
  async run(args) {
    parseCommandArgs(args, LIST_USAGE);
    return withCommandStore(async (store) => {
      const lines = keyStatuses(await store.keys.signingKeys(), Date.now()).map(describe);
      process.stdout.write(lines.map((line) => `${line}\n`).join(""));
      return 0;
    });
  },
};
