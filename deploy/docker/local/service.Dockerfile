# One Pulse binary built on this machine, on the local runtime image: the last stage of
# deploy/docker/Dockerfile with a prebuilt binary in place of the build stage.
ARG RUNTIME_IMAGE
FROM ${RUNTIME_IMAGE}
ARG BINARY
# bin/ holds the binary and the pulse-entrypoint link to it.
COPY bin/ /usr/local/bin/
ENV PULSE_STATE_DIR=/var/lib/pulse \
    HEALTHCHECK_BINARY=${BINARY}
USER 10001:10001
WORKDIR /var/lib/pulse
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["/usr/local/bin/pulse-healthcheck"]
ENTRYPOINT ["/usr/local/bin/pulse-entrypoint"]
