import type { FastifyBaseLogger } from "fastify";

type Bindings = Record<string, unknown>;
type ChildOptions = Parameters<FastifyBaseLogger["child"]>[1];

/**
 * A request's child logger, made only when something logs through it.
 * fastify makes one per request (a pino child: bindings serialized, an object
 * with its own level methods, ~2% of a cheap request) although request
 * logging is off and almost no request logs anything: the per-call line is
 * written by the wrapper through the root logger. What is logged through it
 * is exactly what the pino child would have logged.
 */
class LazyChildLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindingsOf: Bindings,
    private readonly options: ChildOptions,
  ) {}

  private get logger(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindingsOf, this.options));
  }

  get level(): string {
    return this.made?.level ?? this.options?.level ?? this.parent.level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  fatal(...args: unknown[]): void {
    (this.logger.fatal as (...a: unknown[]) => void)(...args);
  }
  error(...args: unknown[]): void {
    (this.logger.error as (...a: unknown[]) => void)(...args);
  }
  warn(...args: unknown[]): void {
    (this.logger.warn as (...a: unknown[]) => void)(...args);
  }
  info(...args: unknown[]): void {
    (this.logger.info as (...a: unknown[]) => void)(...args);
  }
  debug(...args: unknown[]): void {
    (this.logger.debug as (...a: unknown[]) => void)(...args);
  }
  trace(...args: unknown[]): void {
    (this.logger.trace as (...a: unknown[]) => void)(...args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options);
  }

  isLevelEnabled(level: string): boolean {
    return (this.logger as unknown as { isLevelEnabled(level: string): boolean }).isLevelEnabled(level);
  }

  bindings(): Bindings {
    return (this.logger as unknown as { bindings(): Bindings }).bindings();
  }
}

/** fastify's childLoggerFactory: a request's logger, made lazily (LazyChildLogger). */
export function lazyChildLogger(logger: FastifyBaseLogger, bindings: Bindings, options: ChildOptions): FastifyBaseLogger {
  return new LazyChildLogger(logger, bindings, options) as unknown as FastifyBaseLogger;
}
