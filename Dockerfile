# baton's image: the static binary (no cgo) on distroless' static base,
# running as a non-root user. Build it with: make image
#
# In a container baton is PID 1: `baton upgrade` is refused there (the old
# supervisor's exit would end the container). Reload (SIGHUP, baton
# reload) to run a new worker binary or config; replace the container (a
# rolling update) to replace the supervisor.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -tags urfave_cli_no_docs -ldflags "-X main.version=${VERSION}" -o /baton ./cmd/baton

# The OpenSSL variant (make image OPENSSL=1, or --target openssl): RSA
# keys sign in OpenSSL 3's libcrypto, opened at run time
# (internal/opensslrsa, docs/operations.md), on distroless' base image,
# which has glibc and libssl3. The static default below is pure Go.
FROM build AS build-openssl
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -tags urfave_cli_no_docs,openssl -ldflags "-X main.version=${VERSION}" -o /baton ./cmd/baton

FROM gcr.io/distroless/base-debian12:nonroot AS openssl
COPY --from=build-openssl /baton /usr/local/bin/baton
USER 65532:65532
EXPOSE 8080 9101
ENTRYPOINT ["/usr/local/bin/baton"]
CMD ["run", "--config", "/etc/baton/baton.yaml"]

# The default image: the static build.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /baton /usr/local/bin/baton
USER 65532:65532
EXPOSE 8080 9101
ENTRYPOINT ["/usr/local/bin/baton"]
CMD ["run", "--config", "/etc/baton/baton.yaml"]
