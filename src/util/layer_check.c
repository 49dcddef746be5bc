/* layer_check.c — the empty program the build links each layer into, whole, against only the
 * layers below it (CMakeLists.txt): if the link fails, a layer calls upward. */
int main(void)
{
    return 0;
}
