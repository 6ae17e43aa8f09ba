#!/bin/sh
# Run a Kafka class with every jar of /opt/kafka/libs on the classpath (as Kafka's own script does).
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} -Djava.awt.headless=true -cp "/opt/kafka/libs/*" "$@"
