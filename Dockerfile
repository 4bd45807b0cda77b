# The Colloc image: the scheduler and the agent are the same distribution.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY estimator estimator
COPY service service
COPY agent agent
COPY migrations migrations
RUN pip install --no-cache-dir .
ENTRYPOINT ["colloc"]
