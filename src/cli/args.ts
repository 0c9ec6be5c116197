/**
 * Strict parsing of a command's arguments: an option the command does not
 * know, an option without its value or an argument too many is refused with
 * a UsageError naming it (`platform-api serve --port 9090` once served on
 * 8080 as if the option were not there).
 */
import { parseArgs, type ParseArgsConfig } from "node:util";

/** A command line the command cannot run: the dispatcher prints the message and the usage line, and exits 2. */
export class UsageError extends Error {
  constructor(
    message: string,
    /** The command's usage line ("usage: platform-api …"). */
    readonly usage: string,
  ) {
    super(message);
    this.name = "UsageError";
  }
}

type OptionSpecs = NonNullable<ParseArgsConfig["options"]>;

/** What parseCommandArgs found: the options' values (with their defaults) and the positional arguments. */
export interface ParsedArgs {
  values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  positionals: string[];
}

/**
 * Parses args with node:util's parseArgs in strict mode, allowing at most
 * maxPositionals positional arguments. Options named in dashValues take the
 * next argument as their value even when it begins with "-" (a key id may).
 * Throws UsageError naming the first argument that does not fit.
 */
export function parseCommandArgs(
  args: readonly string[],
  usage: string,
  options: OptionSpecs = {},
  maxPositionals = 0,
  dashValues: readonly string[] = [],
): ParsedArgs {
  const joined = joinDashValues(args, dashValues);
  let parsed: ParsedArgs;
  try {
    parsed = parseArgs({ args: joined, options, strict: true, allowPositionals: maxPositionals > 0 });
  } catch (err) {
    throw new UsageError(culprit(joined, options, maxPositionals) ?? firstLine(err), usage);
  }
  if (parsed.positionals.length > maxPositionals)
    throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[maxPositionals])}`, usage);
  return parsed;
}

/** `--name value` as `--name=value` for the options whose value may begin with "-" (parseArgs would call it ambiguous). */
function joinDashValues(args: readonly string[], names: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--") return [...out, ...args.slice(i)];
    if (arg.startsWith("--") && names.includes(arg.slice(2)) && i + 1 < args.length) out.push(`${arg}=${args[++i]}`);
    else out.push(arg);
  }
  return out;
}

/** The first argument strict parsing refuses, in words; undefined when the lenient reading finds none. */
function culprit(args: string[], options: OptionSpecs, maxPositionals: number): string | undefined {
  const { tokens } = parseArgs({ args, options, strict: false, allowPositionals: true, tokens: true });
  let positionals = 0;
  for (const token of tokens) {
    if (token.kind === "positional" && ++positionals > maxPositionals) return `unexpected argument ${JSON.stringify(token.value)}`;
    if (token.kind !== "option") continue;
    const spec = Object.hasOwn(options, token.name) ? options[token.name] : undefined;
    if (spec === undefined) return `unknown option ${token.rawName}`;
    if (spec.type === "boolean" && token.value !== undefined) return `${token.rawName} takes no value`;
    // A missing value, or the next option taken for one (`--out --alg ES256`).
    if (spec.type === "string" && (token.value === undefined || (!token.inlineValue && token.value.startsWith("-"))))
      return `${token.rawName} needs a value`;
  }
  return undefined;
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}
