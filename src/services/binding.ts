import type { DescService } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";

/** One service and its implementation, keyed by method localName. */
export interface ServiceBinding {
  service: DescService;
  // The generated ServiceImpl types are not assignable across services; the
  // wrapper only needs a callable per method. bind() checks the pairing.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  impl: Record<string, (request: any, context: HandlerContext) => unknown>;
}

/**
 * Pairs a service with its implementation, which must implement that very
 * service: a mismatched or incomplete implementation does not compile.
 */
export function bind<S extends DescService>(service: S, impl: ServiceImpl<S>): ServiceBinding {
  return { service, impl: impl as unknown as ServiceBinding["impl"] };
}
