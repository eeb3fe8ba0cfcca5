# syntax=docker/dockerfile:1
# a3fast's image (docs/kubernetes.md, "The image"): the wheel is built in the first stage, with the
# native core compiled and required; the second stage installs it with the 'serve' and 'k8s'
# extras and runs `a3fast serve` as a user that is not root.
#   docker build -t a3fast:0.1.0 .

FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md LICENSE ./
COPY src ./src
COPY vectors ./vectors
# a build without the native core fails here instead of shipping the pure engine alone
ENV A3FAST_REQUIRE_NATIVE=1
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[serve,k8s]"

FROM python:3.11-slim-bookworm AS runtime
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin a3fast
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "a3fast[serve,k8s]" \
 && rm -rf /wheels
USER 10001:10001
EXPOSE 8421
ENTRYPOINT ["a3fast"]
CMD ["serve", "--host=0.0.0.0", "--port=8421", "--watch-k8s"]
