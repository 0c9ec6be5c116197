import type { Metadata } from "@grpc/grpc-js";

/**
 * fetch Headers over header values a transport has already parsed (node's
 * IncomingHttpHeaders, grpc-js Metadata). Handlers mostly read one or two
 * headers; copying every header into undici's Headers, which validates each
 * name and value, was a measurable share of a cheap request. get() and has()
 * read the source; anything else builds a real Headers once and uses it.
 */
export abstract class HeaderView implements Headers {
  private real: Headers | undefined;

  /** One header's value by lower-case name, or null. */
  protected abstract lookup(lowerName: string): string | null;
  /** Every header, for the rare caller that iterates or changes them. */
  protected abstract all(): Iterable<[string, string]>;

  /** Node request headers (pseudo-headers left out; repeated values joined as fetch does). */
  static ofNode(headers: Record<string, string | string[] | undefined>): HeaderView {
    return new NodeHeaderView(headers);
  }

  /** gRPC request metadata (binary values base64, as the gRPC spec writes them; the first of repeated values). */
  static ofGrpcMetadata(metadata: Metadata): HeaderView {
    return new MetadataHeaderView(metadata);
  }

  get(name: string): string | null {
    return this.real ? this.real.get(name) : this.lookup(name.toLowerCase());
  }

  has(name: string): boolean {
    return this.get(name) !== null;
  }

  private materialized(): Headers {
    if (!this.real) {
      const real = new Headers();
      for (const [name, value] of this.all()) real.append(name, value);
      this.real = real;
    }
    return this.real;
  }

  set(name: string, value: string): void {
    this.materialized().set(name, value);
  }

  append(name: string, value: string): void {
    this.materialized().append(name, value);
  }

  delete(name: string): void {
    this.materialized().delete(name);
  }

  getSetCookie(): string[] {
    return this.materialized().getSetCookie();
  }

  forEach(callback: (value: string, key: string, parent: Headers) => void, thisArg?: unknown): void {
    this.materialized().forEach((value, key) => callback.call(thisArg, value, key, this));
  }

  entries(): ReturnType<Headers["entries"]> {
    return this.materialized().entries();
  }

  keys(): ReturnType<Headers["keys"]> {
    return this.materialized().keys();
  }

  values(): ReturnType<Headers["values"]> {
    return this.materialized().values();
  }

  [Symbol.iterator](): ReturnType<Headers["entries"]> {
    return this.materialized()[Symbol.iterator]();
  }
}

function nodeHeaderText(value: string | string[] | undefined): string | null {
  return value === undefined ? null : Array.isArray(value) ? value.join(", ") : value;
}

class NodeHeaderView extends HeaderView {
  constructor(private readonly headers: Record<string, string | string[] | undefined>) {
    super();
  }

  protected lookup(name: string): string | null {
    return name.startsWith(":") ? null : nodeHeaderText(this.headers[name]);
  }

  protected *all(): Iterable<[string, string]> {
    for (const [name, value] of Object.entries(this.headers)) {
      const v = nodeHeaderText(value);
      if (!name.startsWith(":") && v !== null) yield [name, v];
    }
  }
}

function metadataText(value: string | Buffer): string {
  return typeof value === "string" ? value : value.toString("base64");
}

class MetadataHeaderView extends HeaderView {
  constructor(private readonly metadata: Metadata) {
    super();
  }

  protected lookup(name: string): string | null {
    let first: string | Buffer | undefined;
    try {
      first = this.metadata.get(name)[0];
    } catch {
      return null; // not a valid metadata key
    }
    return first === undefined ? null : metadataText(first);
  }

  protected all(): Iterable<[string, string]> {
    return Object.entries(this.metadata.getMap()).map(([name, value]): [string, string] => [name, metadataText(value)]);
  }
}
