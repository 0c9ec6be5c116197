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

/** The methods of a part object: its own function properties and those of its classes, not Object's. */
export function methodNames(part: object): string[] {
  const names = new Set<string>();
  for (const name of Object.keys(part)) if (typeof (part as Record<string, unknown>)[name] === "function") names.add(name);
  for (let proto = Object.getPrototypeOf(part) as object | null; proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto) as object | null) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name !== "constructor" && typeof Object.getOwnPropertyDescriptor(proto, name)?.value === "function") names.add(name);
    }
  }
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
    close: () => store.close(),
  } satisfies Store;
}
