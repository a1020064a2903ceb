# One Pulse binary built on this machine, on the local runtime image: the last stage of
# deploy/docker/Dockerfile with a prebuilt binary in place of the build stage. bin/ holds the
# binary and the pulse-entrypoint link to it (which also tells the health check which
# service this is).
ARG RUNTIME_IMAGE
FROM ${RUNTIME_IMAGE}
COPY bin/ /usr/local/bin/
