import { create, createRegistry, toBinary, type DescFile, type Registry } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import {
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../../gen/grpc/reflection/v1/reflection_pb.js";

/** gRPC code NOT_FOUND, as reflection's ErrorResponse carries it. */
const NOT_FOUND = 5;

/**
 * Answers grpc.reflection.v1 (and the wire-identical v1alpha) requests from the
 * descriptors compiled into the server. One Reflector serves one stream: each
 * file is sent at most once per stream, with its transitive dependencies.
 */
export class Reflector {
  private readonly sent = new Set<string>();

  constructor(private readonly schema: ReflectionSchema) {}

  private get registry(): Registry {
    return this.schema.registry;
  }

  answer(req: ServerReflectionRequest): ServerReflectionResponse {
    const base = { validHost: req.host, originalRequest: req };
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return create(ServerReflectionResponseSchema, {
          ...base,
          messageResponse: { case: "listServicesResponse", value: { service: this.schema.serviceNames.map((name) => ({ name })) } },
        });
      case "fileByFilename":
        return this.files(base, this.schema.files.get(r.value), `file ${r.value} not found`);
      case "fileContainingSymbol":
        return this.files(base, this.fileOfSymbol(r.value), `symbol ${r.value} not found`);
      case "fileContainingExtension": {
        const ext = [...this.registry].find(
          (d) => d.kind === "extension" && d.extendee.typeName === r.value.containingType && d.number === r.value.extensionNumber,
        );
        return this.files(base, ext?.file, `extension ${r.value.extensionNumber} of ${r.value.containingType} not found`);
      }
      case "allExtensionNumbersOfType": {
        if (!this.registry.getMessage(r.value)) return this.error(base, `type ${r.value} not found`);
        const numbers = [...this.registry].flatMap((d) => (d.kind === "extension" && d.extendee.typeName === r.value ? [d.number] : []));
        return create(ServerReflectionResponseSchema, {
          ...base,
          messageResponse: { case: "allExtensionNumbersResponse", value: { baseTypeName: r.value, extensionNumber: numbers } },
        });
      }
      default:
        return this.error(base, "unsupported reflection request");
    }
  }

  private fileOfSymbol(symbol: string): DescFile | undefined {
    const direct = this.registry.get(symbol);
    if (direct) return direct.file;
    // A method ("pkg.Service.Method") or a field/enum value: look up its parent.
    const dot = symbol.lastIndexOf(".");
    return dot > 0 ? this.registry.get(symbol.slice(0, dot))?.file : undefined;
  }

  private files(base: object, file: DescFile | undefined, missing: string): ServerReflectionResponse {
    if (!file) return this.error(base, missing);
    const out: Uint8Array[] = [];
    const visit = (f: DescFile) => {
      if (this.sent.has(f.name)) return;
      this.sent.add(f.name);
      out.push(toBinary(FileDescriptorProtoSchema, f.proto));
      f.dependencies.forEach(visit);
    };
    // The requested file always goes out, even if sent before on this stream.
    this.sent.delete(file.name);
    visit(file);
    return create(ServerReflectionResponseSchema, {
      ...base,
      messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: out } },
    });
  }

  private error(base: object, message: string): ServerReflectionResponse {
    return create(ServerReflectionResponseSchema, {
      ...base,
      messageResponse: { case: "errorResponse", value: { errorCode: NOT_FOUND, errorMessage: message } },
    });
  }
}

/** What reflection serves: every file with its dependencies, and the service names. */
export interface ReflectionSchema {
  files: Map<string, DescFile>;
  registry: Registry;
  serviceNames: readonly string[];
}

/** Collects the files of the given ones and all their dependencies. */
export function reflectionSchema(files: readonly DescFile[], serviceNames: readonly string[]): ReflectionSchema {
  const all = new Map<string, DescFile>();
  const visit = (f: DescFile) => {
    if (all.has(f.name)) return;
    all.set(f.name, f);
    f.dependencies.forEach(visit);
  };
  files.forEach(visit);
  return { files: all, registry: createRegistry(...all.values()), serviceNames };
}
