import type { Store, StoreParts } from "./store.js";

/** The names of the parts a store is made of. */
export const PART_NAMES = [
  "groups",
  "identities",
  "roles",
  "roleBindings",
  "identityProviders",
  "accountAssociations",
  "groupInvites",
  "repos",
  "tags",
  "advisories",
  "keys",
] as const satisfies readonly (keyof StoreParts)[];

/** The part methods that only read; every other method writes. */
export const READ_METHODS: ReadonlySet<string> = new Set(["get", "list", "forIdentity", "findByKeyId", "signingKeys"]);

/** The method names of each class prototype chain, found once (a transaction decorates fresh part objects). */
const CLASS_METHODS = new WeakMap<object, readonly string[]>();

/** The methods along a prototype chain, Object's excepted. */
function classMethods(proto: object | null): readonly string[] {
  if (proto === null || proto === Object.prototype) return [];
  let names = CLASS_METHODS.get(proto);
  if (names === undefined) {
    const found = new Set<string>();
    for (let p: object | null = proto; p && p !== Object.prototype; p = Object.getPrototypeOf(p) as object | null) {
      for (const name of Object.getOwnPropertyNames(p)) {
        if (name !== "constructor" && typeof Object.getOwnPropertyDescriptor(p, name)?.value === "function") found.add(name);
      }
    }
    names = [...found];
    CLASS_METHODS.set(proto, names);
  }
  return names;
}

/** The methods of a part object: its own function properties and those of its classes, not Object's. */
export function methodNames(part: object): string[] {
  const names = new Set<string>();
  for (const name of Object.keys(part)) if (typeof (part as Record<string, unknown>)[name] === "function") names.add(name);
  for (const name of classMethods(Object.getPrototypeOf(part) as object | null)) names.add(name);
  return [...names];
}

/** A method of a part, as a decorator sees it. */
export type PartMethod = (...args: unknown[]) => unknown;

/**
 * The parts with every method replaced by wrap(part, method, original),
 * the original bound to its part.
 */
export function decorateParts(parts: StoreParts, wrap: (part: string, method: string, original: PartMethod) => PartMethod): StoreParts {
  const out: Record<string, unknown> = {};
  for (const partName of PART_NAMES) {
    const part = parts[partName] as unknown as Record<string, PartMethod>;
    const decorated: Record<string, PartMethod> = {};
    for (const name of methodNames(part)) decorated[name] = wrap(partName, name, part[name]!.bind(part));
    out[partName] = decorated;
  }
  return out as unknown as StoreParts;
}

/**
 * A store whose parts, inside transactions too, are decorated by wrap; its
 * own methods pass through to the store.
 */
export function decorateStore(store: Store, wrap: (part: string, method: string, original: PartMethod) => PartMethod): Store {
  return {
    ...decorateParts(store, wrap),
    readVersions: () => store.readVersions(),
    version: (tables) => store.version(tables),
    refresh: () => store.refresh(),
    transaction: (fn, signal) => store.transaction((tx) => fn(decorateParts(tx, wrap)), signal),
    ready: () => store.ready(),
    describe: () => store.describe(),
    close: () => store.close(),
  } satisfies Store;
}
