"""The validator: Spark Structured Streaming from the commands topic to the events and rejections topics."""
